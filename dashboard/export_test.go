package dashboard

import (
	"bufio"
	"io"
	"strings"
)

// SSEEvent is a frame of a text/event-stream as ReadSSE reads it: an event (its id, event
// name and data), or a comment line (Name "comment", Data the line).
type SSEEvent struct{ ID, Name, Data string }

// ReadSSE calls yield with each frame of r, in order, until r ends or yield returns false.
// Lines up to 16 MiB; a retry field is skipped.
func ReadSSE(r io.Reader, yield func(SSEEvent) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	var ev SSEEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev != (SSEEvent{}) && !yield(ev) {
				return
			}
			ev = SSEEvent{}
		case strings.HasPrefix(line, ":"):
			if !yield(SSEEvent{Name: "comment", Data: line}) {
				return
			}
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[len("id: "):]
		case strings.HasPrefix(line, "event: "):
			ev.Name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			ev.Data = line[len("data: "):]
		}
	}
}
