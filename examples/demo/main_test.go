package main

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// The main job (SPEC §9) end to end on a real server: run fails when a task does not
// complete or the forked task does not quote the parent's token.
func TestDemo(t *testing.T) {
	t.Setenv("OPENCODE_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := run(ctx, "general")
	if errors.Is(err, opencodetest.ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
