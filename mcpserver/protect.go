package mcpserver

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// refuseBrowser returns why r must be refused because a web page may have sent it, or ""
// (see [WithAllowedOrigins]): an Origin that is not allowed; no Origin, but a
// Sec-Fetch-Site that names another site; over a loopback connection, a Host that is not a
// loopback name — a page whose name was rebound to 127.0.0.1. The MCP SDK refuses such a
// Host too; checking it here first keeps a refused request from taking a session's place.
func (s *Server) refuseBrowser(r *http.Request) string {
	if origin := r.Header.Get("Origin"); origin != "" {
		if !s.cfg.origins[strings.ToLower(origin)] {
			return "origin not allowed"
		}
	} else if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return "request from another site"
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil &&
		isLoopback(local.String()) && !isLoopback(r.Host) {
		return "invalid Host header"
	}
	return ""
}

// isLoopback reports whether addr (host or host:port) is localhost or a loopback address.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
