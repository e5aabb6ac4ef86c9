package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

const loginHelp = `Prints a new login link for the status page of the running asyncagents serve. A link
works once, within a few minutes (serve prints the first one when it starts), and opens a
browser session of its own; it is shown here only, never logged. On Unix it asks serve
through its Unix socket -socket (whose peer is checked), elsewhere at -listen with the
token of -token-file; -listen also names the address the link is for.`

type loginConfig struct {
	serveAddr
	base string // serve's TCP address, for the link
}

func runLogin(ctx context.Context, fs *flag.FlagSet, args []string, out, _ io.Writer) error {
	var c loginConfig
	c.serveAddr.flags(fs)
	if socketSupported {
		fs.StringVar(&c.base, "listen", DefaultListen, "the address serve listens on (-listen of serve), which the link is for")
	}
	if err := parse(fs, args, loginHelp); err != nil {
		return err
	}
	if !socketSupported {
		c.base = c.listen
	}
	var link struct {
		Link    string    `json:"link"`
		Expires time.Time `json:"expires"`
	}
	if _, err := c.ask(ctx, http.MethodPost, "/api/login-link", &link); err != nil {
		return err
	}
	fmt.Fprintf(out, "http://%s/%s\n(works once, until %s)\n", quote(c.base), quote(link.Link), link.Expires.Local().Format(time.TimeOnly))
	return nil
}
