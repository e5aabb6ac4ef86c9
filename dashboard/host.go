package dashboard

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// checkHost refuses requests that arrive on a loopback address with a Host header that
// names neither localhost, nor a loopback IP, nor an allowed host: a page whose name was
// re-bound to 127.0.0.1 (DNS rebinding) reaches the handler with its own name.
func (h *Handler) checkHost(next http.Handler) http.Handler {
	if h.cfg.anyHost {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil &&
			loopback(local.String()) && !loopback(r.Host) && !h.allowedHost(r.Host) {
			writeError(w, http.StatusForbidden, "host not allowed: use localhost or a loopback address")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostName returns the host of a Host header or an address, without port or brackets,
// in lower case.
func hostName(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	return strings.ToLower(host)
}

// loopback reports whether hostport names localhost or a loopback IP.
func loopback(hostport string) bool {
	host := hostName(hostport)
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (h *Handler) allowedHost(hostport string) bool {
	host := hostName(hostport)
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	for _, a := range h.cfg.allowedHosts {
		if host == a {
			return true
		}
	}
	return false
}
