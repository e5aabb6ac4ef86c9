package hints

import (
	"fmt"
	"strings"
	"time"
)

// Outcome is how a task's run (or a resume of it) ended, for the visible part of a
// notification.
type Outcome int

// Outcomes.
const (
	Completed Outcome = iota // the task finished
	Failed                   // the task ended with an error
	Cancelled                // the task was cancelled
	Waiting                  // the task waits for a permission answer (Notice.Permission)
)

// DefaultToolPrefix is the prefix of the tool names the hidden part mentions
// ("asyncagents_output") when [Hidden] is given an empty prefix.
const DefaultToolPrefix = "asyncagents"

// NoTools, given as the prefix to [Hidden] and [Turn], says the parent's model has not been
// given the tools (its host reads the results itself): the texts then name no tool.
const NoTools = "-"

// Notice describes one terminal transition of a task: a run or a resume that ended.
//
// Error, Permission and Patterns are the task's text: its child or its provider wrote them.
// They are shown only by [Quote] and [Permission], on one line and cut, never as words of
// the notification.
type Notice struct {
	Outcome     Outcome
	Description string        // the task's description, quoted in the visible part
	Duration    time.Duration // of the run, or of the resume for a resume; shown in whole seconds
	Resume      int           // > 0: the notice is for resume number Resume of the task
	Completed   int           // tasks of the batch in a terminal state, this one included
	Total       int           // tasks of the batch
	Running     int           // tasks of the batch still running
	DisplayID   string        // the task's display id, named in the hidden part
	Error       string        // the error message, for Failed; "" for none
	Permission  string        // the permission (or tool) the task waits for an answer to; "" for none
	Patterns    []string      // what that request asks for
	Usage       string        // what the run used ("16.2k tokens, $0.0491"), said in the hidden part; "" for nothing
	Changes     *Changes      // what an isolated task changed on its branch; nil for a task without one
	Paused      bool          // Cancelled at its budget, to be resumed (WithBudgetPause)
}

// Changes is what an isolated task's branch changes, for its notification.
type Changes struct {
	Branch                string    // the task's branch
	Files, Added, Deleted int       // files changed, lines added and deleted
	Overlaps              []Overlap // files others changed too
	Error                 string    // why its changes could not be committed; "" when they were
}

// Overlap is a file an isolated task changed that others changed too: With names them
// (task ids, or "parent" for the parent's working tree).
type Overlap struct {
	Path string
	With []string
}

// Visible returns the visible part of the parent notification, two lines joined by "\n":
//
//	✓ Agent "<description>" finished in <duration>.     Completed
//	✗ Agent "<description>" failed in <duration>.       Failed
//	⊘ Agent "<description>" cancelled after <duration>. Cancelled
//	⏸ Agent "<description>" is waiting for permission: <permission>.  Waiting, Permission set
//	⏸ Agent "<description>" paused at its budget after <duration>.     Paused
//	✓ Resume #<n> completed in <duration>.              Completed, Resume > 0
//	✗ Resume #<n> failed in <duration>.                 otherwise, Resume > 0
//	Task Progress: <Completed>/<Total>
//
// An isolated task's notice (Changes set) adds, before the progress line:
//
//	Changed <Files> files (+<Added> −<Deleted>) on branch <Branch>.
//
// The description is quoted by [Quote], the permission and its patterns by [Permission];
// the duration is formatted by [Duration].
// With debug set, " [hint attached]" is added at the end.
func Visible(n Notice, debug bool) string {
	var head string
	d := Duration(n.Duration)
	switch {
	case n.Paused:
		head = fmt.Sprintf("⏸ Agent %s paused at its budget after %s.", Quote(n.Description), d)
	case n.Resume > 0 && n.Outcome == Completed:
		head = fmt.Sprintf("✓ Resume #%d completed in %s.", n.Resume, d)
	case n.Resume > 0:
		head = fmt.Sprintf("✗ Resume #%d failed in %s.", n.Resume, d)
	case n.Outcome == Completed:
		head = fmt.Sprintf("✓ Agent %s finished in %s.", Quote(n.Description), d)
	case n.Outcome == Failed:
		head = fmt.Sprintf("✗ Agent %s failed in %s.", Quote(n.Description), d)
	case n.Outcome == Waiting:
		head = fmt.Sprintf("⏸ Agent %s is waiting for permission: %s.", Quote(n.Description), Permission(n.Permission, n.Patterns))
	default:
		head = fmt.Sprintf("⊘ Agent %s cancelled after %s.", Quote(n.Description), d)
	}
	s := head
	if c := n.Changes; c != nil && c.Error == "" {
		s += fmt.Sprintf("\nChanged %d files (+%d −%d) on branch %s.", c.Files, c.Added, c.Deleted, c.Branch)
	}
	s += fmt.Sprintf("\nTask Progress: %d/%d", n.Completed, n.Total)
	if debug {
		s += " [hint attached]"
	}
	return s
}

// Hidden returns the hidden guidance for the parent's model, lines joined by "\n":
//
//	The task failed. Its error, quoted: "<Error's first line>"          when Error is set
//	The task is waiting for a permission answer: <Permission>.          when Permission is set
//	It used <Usage>.                                                    when Usage is set
//
// for an isolated task (Changes set), one of
//
//	Its changes are on its branch; your files are untouched until <prefix>_merge(task_id="<DisplayID>").
//	Its changes could not be committed. The error, quoted: "<Error>"
//
// and, when others changed files it changed too,
//
//	A merge may conflict: others changed files it changed too: "<path>" (<with>, …); …
//
// (paths quoted by [Quote], at most 10, then "and <n> more"),
//
// then, while other tasks of the batch are running (Running > 0):
//
//	If you need results immediately, use <prefix>_output(task_id="<DisplayID>").
//	You can continue working or just say 'waiting' and halt.
//	WATCH OUT for leftovers, you will likely WANT to wait for all agents to complete.
//
// or, when none is:
//
//	All <Total> tasks finished.
//	Use <prefix>_output tools to see agent responses.
//
// prefix is the tool-name prefix ([DefaultToolPrefix] when empty); with [NoTools] the lines
// that name a tool are left out, and the merge line says "until it is merged". DisplayID is
// quoted as a Go string. The error's first line is shown by [Quote] (" …" in the quotes says more lines
// follow), the permission and its patterns by [Permission]: no text of the task's reaches the
// hint otherwise, so the parent's model reads it as a quotation, never as guidance.
func Hidden(n Notice, prefix string) string {
	if prefix == "" {
		prefix = DefaultToolPrefix
	}
	var lines []string
	if n.Error != "" {
		lines = append(lines, "The task failed. Its error, quoted: "+Quote(firstLine(n.Error)))
	}
	if n.Permission != "" {
		lines = append(lines, "The task is waiting for a permission answer: "+Permission(n.Permission, n.Patterns)+".")
	}
	if n.Paused {
		s := "Its run reached its budget and was stopped; what it did so far is its result. Resume it to go on (with a larger budget if you wish), or clear it."
		if prefix != NoTools {
			s = fmt.Sprintf("Its run reached its budget and was stopped; %s_output(task_id=%q) shows what it did so far. "+
				"Resume it with %s_task (resume, and budget_tokens or budget_cost to change the budget) to go on, or clear it.", prefix, n.DisplayID, prefix)
		}
		lines = append(lines, s)
	}
	if n.Usage != "" {
		lines = append(lines, "It used "+n.Usage+".")
	}
	if c := n.Changes; c != nil {
		lines = append(lines, changesLines(c, n.DisplayID, prefix)...)
	}
	tools := prefix != NoTools
	if n.Running > 0 {
		if tools {
			lines = append(lines, fmt.Sprintf("If you need results immediately, use %s_output(task_id=%q).", prefix, n.DisplayID))
		}
		lines = append(lines,
			"You can continue working or just say 'waiting' and halt.",
			"WATCH OUT for leftovers, you will likely WANT to wait for all agents to complete.")
	} else {
		lines = append(lines, fmt.Sprintf("All %d tasks finished.", n.Total))
		if tools {
			lines = append(lines, fmt.Sprintf("Use %s_output tools to see agent responses.", prefix))
		}
	}
	return strings.Join(lines, "\n")
}

// Duration formats d as 12s, 3m 4s or 1h 2m 3s: whole seconds, rounded down; a negative d
// is 0s.
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

// maxListed is how many display ids [Turn] lists on a line before "and N more".
const maxListed = 10

// Turn returns the prompt that asks a parent's model for one turn after notifications it
// has not seen yet (their tasks' display ids, ended) were posted without reply, lines joined
// by "\n":
//
//	<n> of your background tasks reported since your last turn: <ids>.
//	Still running: <ids>.                 while running is not empty, otherwise
//	No background task is running.
//	Their notifications are above. Use <prefix>_output(task_id="<id>") to read a result.
//
// Each line lists at most 10 ids, then "and <n> more". prefix is the tool-name prefix
// ([DefaultToolPrefix] when empty); with [NoTools] the last line is "Their notifications are
// above."
func Turn(ended, running []string, prefix string) string {
	if prefix == "" {
		prefix = DefaultToolPrefix
	}
	lines := []string{fmt.Sprintf("%d of your background tasks reported since your last turn: %s.", len(ended), list(ended))}
	if len(running) > 0 {
		lines = append(lines, "Still running: "+list(running)+".")
	} else {
		lines = append(lines, "No background task is running.")
	}
	if prefix == NoTools {
		lines = append(lines, "Their notifications are above.")
	} else {
		lines = append(lines, fmt.Sprintf("Their notifications are above. Use %s_output(task_id=\"<id>\") to read a result.", prefix))
	}
	return strings.Join(lines, "\n")
}

// list joins up to maxListed ids with ", ", then says how many more there are.
func list(ids []string) string {
	if len(ids) <= maxListed {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:maxListed], ", "), len(ids)-maxListed)
}

// changesLines are the lines of Hidden that say what an isolated task changed.
func changesLines(c *Changes, id, prefix string) []string {
	var lines []string
	if c.Error != "" {
		lines = append(lines, "Its changes could not be committed. The error, quoted: "+Quote(firstLine(c.Error)))
	} else if prefix == NoTools {
		lines = append(lines, "Its changes are on its branch; your files are untouched until it is merged.")
	} else {
		lines = append(lines, fmt.Sprintf("Its changes are on its branch; your files are untouched until %s_merge(task_id=%q).", prefix, id))
	}
	if len(c.Overlaps) == 0 {
		return lines
	}
	files := make([]string, 0, min(len(c.Overlaps), maxListed))
	for _, o := range c.Overlaps[:min(len(c.Overlaps), maxListed)] {
		files = append(files, fmt.Sprintf("%s (%s)", Quote(o.Path), strings.Join(o.With, ", ")))
	}
	s := "A merge may conflict: others changed files it changed too: " + strings.Join(files, "; ")
	if more := len(c.Overlaps) - len(files); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return append(lines, s+".")
}
