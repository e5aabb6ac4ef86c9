//go:build !unix

package pgstoretest

import (
	"errors"
	"os"
	"os/exec"
)

type runAs struct{}

func serverUser() (*runAs, error) {
	return nil, errors.New("pgstoretest: supported on Unix only")
}

func (u *runAs) apply(*exec.Cmd)  {}
func (u *runAs) own(string) error { return nil }
func interrupt(p *os.Process)     { p.Kill() }
func quit(p *os.Process)          { p.Kill() }
func killGroup(p *os.Process)     { p.Kill() }
