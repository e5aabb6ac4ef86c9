package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MinGitVersion is the oldest git the package runs: [Repo.Merge] needs git merge-tree
// --write-tree (git 2.38).
const MinGitVersion = "2.38"

// minMajor and minMinor are MinGitVersion as numbers.
const minMajor, minMinor = 2, 38

// isolation is the configuration every git run gets, above any the repository has: no
// hooks, no signing, no background gc, no pager or colour, no filesystem monitor, the
// conflict style the hunk reader expects, and paths as they are.
var isolation = [][2]string{
	{"core.hooksPath", "/dev/null"},
	{"core.fsmonitor", "false"},
	{"core.splitIndex", "false"},
	{"core.safecrlf", "false"},
	{"core.quotePath", "false"},
	{"core.pager", "cat"},
	{"commit.gpgSign", "false"},
	{"gc.auto", "0"},
	{"maintenance.auto", "false"},
	{"merge.conflictStyle", "diff3"},
	{"diff.noprefix", "false"},
	{"diff.mnemonicPrefix", "false"},
	{"diff.renames", "false"},
	{"color.ui", "false"},
	{"submodule.recurse", "false"},
	{"advice.detachedHead", "false"},
}

// carried names the settings of the user's own configuration that decide how the parent's
// files map to the repository (line endings, what is ignored, attributes): they are read
// once, in Open, and passed on, so a snapshot sees the files as the user's git does.
const carried = `^core\.(autocrlf|eol|excludesfile|attributesfile)$`

// mallocTuning keeps glibc's malloc from handing memory back to the system after every
// object git hashes (zlib's buffers of a few hundred KiB each), unless the environment sets
// these already. Where a page fault is dear (virtual machines without nested paging) the
// trimming dominates: git add of 1,000 new files took 2.0 s without it and 0.11 s with it
// (2026-11, a 2-CPU Firecracker VM). Other C libraries ignore the variables; the memory kept
// is the git process's, until it exits.
var mallocTuning = [][2]string{
	{"MALLOC_TRIM_THRESHOLD_", "268435456"},
	{"MALLOC_TOP_PAD_", "67108864"},
}

// maxStderr is how much of a git command's standard error an error keeps.
const maxStderr = 16 << 10

// waitDelay bounds how long a cancelled git command's output is waited for.
const waitDelay = 5 * time.Second

// runner runs git with an environment that leaves the user's and the system's
// configuration out.
type runner struct {
	path string
	env  []string
}

// newRunner finds git (cfg.git), checks its version and builds the isolated environment.
func newRunner(ctx context.Context, cfg config) (*runner, error) {
	path, err := exec.LookPath(cfg.git)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGitMissing, err)
	}
	g := &runner{path: path}
	g.env = isolatedEnv(os.Environ(), cfg, nil)
	out, err := g.run(ctx, "", nil, "version")
	if err != nil {
		return nil, err
	}
	major, minor, ok := parseVersion(out)
	if !ok {
		return nil, fmt.Errorf("%w: cannot read the version in %q", ErrGitVersion, strings.TrimSpace(out))
	}
	if major < minMajor || major == minMajor && minor < minMinor {
		return nil, fmt.Errorf("%w: %s is %d.%d; %s or newer is needed", ErrGitVersion, path, major, minor, MinGitVersion)
	}
	return g, nil
}

// carry reads the carried settings of the user's configuration as seen from dir (system,
// global and the repository's), and adds them to the runner's environment.
func (g *runner) carry(ctx context.Context, dir string, cfg config) error {
	cmd := exec.CommandContext(ctx, g.path, "config", "-z", "--type=path", "--get-regexp", carried)
	cmd.Dir = dir
	cmd.Env = withoutGit(os.Environ(), true)
	var errb capWriter
	cmd.Stderr = &errb
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && errb.Len() == 0 {
		return nil // none set
	}
	if err != nil {
		return g.fail(ctx, []string{"config", "--get-regexp", carried}, err, errb.String())
	}
	var kept [][2]string
	for entry := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		key, value, _ := strings.Cut(entry, "\n")
		kept = append(kept, [2]string{key, value})
	}
	g.env = isolatedEnv(os.Environ(), cfg, kept)
	return nil
}

// withoutGit returns env without git's variables (those that point it at another
// repository, index or configuration) and the language, keeping the GIT_CONFIG… ones when
// config is set.
func withoutGit(env []string, config bool) []string {
	out := make([]string, 0, len(env)+32)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if config && strings.HasPrefix(name, "GIT_CONFIG") {
			out = append(out, kv)
			continue
		}
		if strings.HasPrefix(name, "GIT_") || name == "LC_ALL" || name == "LANGUAGE" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// isolatedEnv is base without git's variables, plus: no system or global configuration, the
// isolation and carried settings, the author, no prompts, no optional locks (a read never
// rewrites an index), and messages in English.
func isolatedEnv(base []string, cfg config, carry [][2]string) []string {
	env := withoutGit(base, false)
	env = append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_PAGER=cat",
		"LC_ALL=C",
		"GIT_AUTHOR_NAME="+cfg.name, "GIT_AUTHOR_EMAIL="+cfg.email,
		"GIT_COMMITTER_NAME="+cfg.name, "GIT_COMMITTER_EMAIL="+cfg.email,
	)
	for _, kv := range mallocTuning {
		if !slices.ContainsFunc(base, func(b string) bool { return strings.HasPrefix(b, kv[0]+"=") }) {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	settings := append(append([][2]string(nil), carry...), isolation...)
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(settings)))
	for i, kv := range settings {
		n := strconv.Itoa(i)
		env = append(env, "GIT_CONFIG_KEY_"+n+"="+kv[0], "GIT_CONFIG_VALUE_"+n+"="+kv[1])
	}
	return env
}

// parseVersion reads "git version 2.39.5" (and "2.39.5.windows.1", "2.39.3 (Apple Git-145)").
func parseVersion(out string) (major, minor int, ok bool) {
	fields := strings.Fields(out)
	if len(fields) < 3 || fields[0] != "git" || fields[1] != "version" {
		return 0, 0, false
	}
	parts := strings.SplitN(fields[2], ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// command is git args in dir (the process's directory when empty) with the isolated
// environment and env added.
func (g *runner) command(ctx context.Context, dir string, env []string, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.path, args...)
	cmd.Dir = dir
	cmd.Env = append(g.env[:len(g.env):len(g.env)], env...)
	cmd.WaitDelay = waitDelay
	return cmd
}

// run runs git args in dir and returns its standard output. A failure is a *gitError, or
// the context's error when ctx ended.
func (g *runner) run(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := g.command(ctx, dir, env, args)
	var out bytes.Buffer
	var errb capWriter
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), g.fail(ctx, args, err, errb.String())
	}
	return out.String(), nil
}

// line is run with the output's trailing newline cut.
func (g *runner) line(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := g.run(ctx, dir, nil, args...)
	return strings.TrimSuffix(out, "\n"), err
}

// stream runs git args in dir and hands its standard output to read. When read returns
// stop, git is killed and its exit is not an error; otherwise the rest of the output is
// read and dropped, and git's exit counts.
func (g *runner) stream(ctx context.Context, dir string, read func(io.Reader) (stop bool, err error), args ...string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := g.command(ctx, dir, nil, args)
	var errb capWriter
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("worktree: git %s: %w", args[0], err)
	}
	if err := cmd.Start(); err != nil {
		return g.fail(ctx, args, err, "")
	}
	stop, rerr := read(out)
	if stop || rerr != nil {
		cancel()
	} else {
		_, _ = io.Copy(io.Discard, out)
	}
	werr := cmd.Wait()
	switch {
	case rerr != nil:
		return rerr
	case stop:
		return nil
	case werr != nil:
		return g.fail(ctx, args, werr, errb.String())
	}
	return nil
}

// fail turns the error of a git run into the package's: the context's error when ctx ended,
// a *gitError for an exit, or the error of starting the command.
func (g *runner) fail(ctx context.Context, args []string, err error, stderr string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("worktree: git %s: %w", args[0], context.Cause(ctx))
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return &gitError{args: args, code: exit.ExitCode(), stderr: stderr}
	}
	return fmt.Errorf("worktree: git %s: %w", args[0], err)
}

// exitCode is the exit code of a git run's error, or -1 when it is not a git exit.
func exitCode(err error) int {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.code
	}
	return -1
}

// capWriter keeps the first maxStderr bytes written to it.
type capWriter struct{ bytes.Buffer }

func (w *capWriter) Write(p []byte) (int, error) {
	if room := maxStderr - w.Len(); room > 0 {
		w.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
