package worktree

import (
	"fmt"
	"strings"
)

// Defaults of the options of [Open].
const (
	// DefaultBranchPrefix is the folder of the task branches: task "ses_1" works on branch
	// "asyncagents/ses_1" (refs/heads/asyncagents/ses_1).
	DefaultBranchPrefix = "asyncagents"
	// DefaultAuthorName and DefaultAuthorEmail sign the commits the package makes: the
	// parent's snapshot and a task's changes.
	DefaultAuthorName  = "asyncagents"
	DefaultAuthorEmail = "asyncagents@localhost"
	// DefaultGit is the git command, looked up on PATH.
	DefaultGit = "git"
)

type config struct {
	git         string
	prefix      string
	name, email string
}

func defaultConfig() config {
	return config{git: DefaultGit, prefix: DefaultBranchPrefix, name: DefaultAuthorName, email: DefaultAuthorEmail}
}

// validate checks what can be checked without git; the prefix is checked again by git
// (check-ref-format) in Open.
func (c *config) validate() error {
	switch {
	case c.git == "":
		return fmt.Errorf("%w: empty git command", ErrInvalidOption)
	case c.prefix == "" || strings.HasPrefix(c.prefix, "/") || strings.HasSuffix(c.prefix, "/"):
		return fmt.Errorf("%w: branch prefix %q must be a non-empty ref path without a leading or trailing slash", ErrInvalidOption, c.prefix)
	case c.name == "" || c.email == "" || strings.ContainsAny(c.name+c.email, "<>\n"):
		return fmt.Errorf("%w: author %q <%s> must be a name and an email without <, > or newlines", ErrInvalidOption, c.name, c.email)
	}
	return nil
}

// Option configures a [Repo]; pass options to [Open].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithGit sets the git command: a path, or a name looked up on PATH. Defaults to
// [DefaultGit]. It must be git [MinGitVersion] or newer.
func WithGit(path string) Option { return optionFunc(func(c *config) { c.git = path }) }

// WithBranchPrefix sets the folder of the task branches and of their base refs: task id
// works on refs/heads/<prefix>/<id>, and its base commit is held by refs/<prefix>/base/<id>.
// Defaults to [DefaultBranchPrefix]; it must be a valid ref path (git check-ref-format),
// without a leading or trailing slash.
func WithBranchPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.prefix = prefix })
}

// WithAuthor sets the author and committer of the commits the package makes. Defaults to
// [DefaultAuthorName] and [DefaultAuthorEmail]; neither may be empty or hold <, > or a
// newline.
func WithAuthor(name, email string) Option {
	return optionFunc(func(c *config) { c.name, c.email = name, email })
}
