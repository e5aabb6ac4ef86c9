package opencodetest

import (
	"fmt"
	"os/exec"
	"strings"
)

// tuiCommand returns the command that runs `bin args…` (the TUI) in a pseudo-terminal of
// its own: script -q -e -f -c '<command>' /dev/null, the command quoted for the shell.
func tuiCommand(bin string, args []string) (*exec.Cmd, error) {
	script, err := exec.LookPath("script")
	if err != nil {
		return nil, fmt.Errorf("opencodetest: WithTUI needs script(1): %w", err)
	}
	words := make([]string, 0, len(args)+1)
	for _, w := range append([]string{bin}, args...) {
		words = append(words, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
	}
	return exec.Command(script, "-q", "-e", "-f", "-c", strings.Join(words, " "), "/dev/null"), nil
}
