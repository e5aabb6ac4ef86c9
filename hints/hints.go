package hints

import (
	"fmt"
	"strings"
	"time"
)

// Outcome is what happened to a task, for the visible part of a notification.
type Outcome int

// Outcomes.
const (
	Completed Outcome = iota // N-1
	Failed                   // N-2
	Cancelled                // N-4
)

// DefaultToolPrefix is the prefix of the LLM tool names the hidden hint mentions.
const DefaultToolPrefix = "asyncagents"

// Notice describes one terminal transition of a task.
type Notice struct {
	Outcome     Outcome
	Description string        // the task's description
	Duration    time.Duration // of the run (of the resume for a resume)
	Resume      int           // > 0: the notice is for resume number Resume (N-5)
	Completed   int           // terminal tasks of the batch
	Total       int           // tasks of the batch
	Running     int           // tasks of the batch still running
	DisplayID   string        // the task's display id (N-7)
	Error       string        // the error message, for Failed (N-9)
	Permission  string        // a pending permission: tool and patterns (N-9)
}

// Visible returns the visible part of the parent notification (N-1, N-2, N-4, N-5), with
// " [hint attached]" at the end when debug is set (N-6).
func Visible(n Notice, debug bool) string {
	var head string
	d := Duration(n.Duration)
	switch {
	case n.Resume > 0 && n.Outcome == Completed:
		head = fmt.Sprintf("✓ **Resume #%d completed in %s.**", n.Resume, d)
	case n.Resume > 0:
		head = fmt.Sprintf("✗ **Resume #%d failed in %s.**", n.Resume, d)
	case n.Outcome == Completed:
		head = fmt.Sprintf("✓ **Agent %q finished in %s.**", n.Description, d)
	case n.Outcome == Failed:
		head = fmt.Sprintf("✗ **Agent %q failed in %s.**", n.Description, d)
	default:
		head = fmt.Sprintf("⊘ **Agent %q cancelled after %s.**", n.Description, d)
	}
	s := fmt.Sprintf("%s\nTask Progress: %d/%d", head, n.Completed, n.Total)
	if debug {
		s += " [hint attached]"
	}
	return s
}

// Hidden returns the hidden (synthetic) guidance for the parent's model (N-7, N-8, N-9).
// prefix is the tool-name prefix (DefaultToolPrefix when empty).
func Hidden(n Notice, prefix string) string {
	if prefix == "" {
		prefix = DefaultToolPrefix
	}
	var lines []string
	if n.Error != "" {
		lines = append(lines, "The task failed: "+n.Error)
	}
	if n.Permission != "" {
		lines = append(lines, "The task is waiting for a permission answer: "+n.Permission)
	}
	if n.Running > 0 {
		lines = append(lines,
			fmt.Sprintf("If you need results immediately, use %s_output(task_id=%q).", prefix, n.DisplayID),
			"You can continue working or just say 'waiting' and halt.",
			"WATCH OUT for leftovers, you will likely WANT to wait for all agents to complete.")
	} else {
		lines = append(lines,
			fmt.Sprintf("All %d tasks finished.", n.Total),
			fmt.Sprintf("Use %s_output tools to see agent responses.", prefix))
	}
	return strings.Join(lines, "\n")
}

// Duration formats d as 12s, 3m 4s or 1h 2m 3s (whole seconds, rounded down).
func Duration(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	h, m := s/3600, s/60%60
	s %= 60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh %dm %ds", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm %ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}
