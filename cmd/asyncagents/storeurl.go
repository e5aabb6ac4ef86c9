package main

import (
	"net/url"
	"strings"
)

// The -store flag of serve and tasks: a file, or a PostgreSQL URL. A URL may carry
// passwords — in its user information (postgres://user:password@host/db) and as the query
// parameters password and sslpassword (the client key's) — which are never printed or
// logged: storeName masks them, and storePasswordWarning says where they belong instead.

// storeMask replaces a password of a store URL where it is shown (url.URL.Redacted's mask).
const storeMask = "xxxxx"

// isPostgresURL reports whether store names a PostgreSQL database.
func isPostgresURL(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// storeName is store as it may be shown: in a URL, the user information's password and
// the values of the query parameters password and sslpassword (any case, any escaping of
// the name) are replaced by "xxxxx"; the other parameters stay as written, in their order.
// A URL that does not parse is not shown at all.
func storeName(store string) string {
	if !isPostgresURL(store) {
		return store
	}
	u, err := url.Parse(store)
	if err != nil {
		return "a PostgreSQL URL that does not parse"
	}
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, pair := range pairs {
			if key, _, ok := strings.Cut(pair, "="); ok && secretParam(key) {
				pairs[i] = key + "=" + storeMask
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	return u.Redacted()
}

// secretParam reports whether the raw query key names a password parameter.
func secretParam(rawKey string) bool {
	key, err := url.QueryUnescape(rawKey)
	if err != nil {
		key = rawKey
	}
	key = strings.ToLower(key)
	return key == "password" || key == "sslpassword"
}

// storePasswordWarning returns, when store is a PostgreSQL URL that carries a password,
// a warning that says where to put it instead; otherwise "". A command line is read by
// the other users of the machine (ps) and kept in shell history.
func storePasswordWarning(store string) string {
	if !isPostgresURL(store) {
		return ""
	}
	u, err := url.Parse(store)
	if err != nil {
		return ""
	}
	_, carries := u.User.Password()
	for _, pair := range strings.Split(u.RawQuery, "&") {
		if key, _, _ := strings.Cut(pair, "="); u.RawQuery != "" && secretParam(key) {
			carries = true
		}
	}
	if !carries {
		return ""
	}
	return "warning: the -store URL carries a password, which other users can read in the process list " +
		"and your shell keeps in its history; leave it out of the URL and set PGPASSWORD, " +
		"or put it in a .pgpass file (~/.pgpass, or the file of PGPASSFILE or the URL's passfile parameter)"
}
