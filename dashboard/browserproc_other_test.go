//go:build !linux

package dashboard_test

import (
	"os/exec"
	"time"
)

func ownGroup(*exec.Cmd) {}

func stopGroup(int, time.Duration) {}
