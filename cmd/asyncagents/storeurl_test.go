package main

import (
	"strings"
	"testing"
)

// Issue 35 item 8: a store URL is shown with every password masked — the user
// information's, and the values of the password and sslpassword parameters, however the
// name is written — and the rest as written.
func TestStoreNameMasksPasswords(t *testing.T) {
	for _, tc := range []struct{ store, want string }{
		{"/var/lib/asyncagents/tasks.jsonl", "/var/lib/asyncagents/tasks.jsonl"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u:secret@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u@h/db?password=secret", "postgres://u@h/db?password=xxxxx"},
		{"postgresql://u@h:5433/db?sslmode=verify-full&sslpassword=secret&connect_timeout=5",
			"postgresql://u@h:5433/db?sslmode=verify-full&sslpassword=xxxxx&connect_timeout=5"},
		{"postgres://u:one@h/db?Password=two&pass%77ord=three&sslPassword=four",
			"postgres://u:xxxxx@h/db?Password=xxxxx&pass%77ord=xxxxx&sslPassword=xxxxx"},
		{"postgres://u@h/db?password=a%26b%3Dc&application_name=x", "postgres://u@h/db?password=xxxxx&application_name=x"},
		{"postgres://u@h/db?password=secret&password=again", "postgres://u@h/db?password=xxxxx&password=xxxxx"},
		{"postgres://u@h/db?passfile=/home/u/.pgpass", "postgres://u@h/db?passfile=/home/u/.pgpass"},
		{"postgres://u:secret@h:port/db?password=secret", "a PostgreSQL URL that does not parse"},
	} {
		got := storeName(tc.store)
		if got != tc.want {
			t.Errorf("storeName(%q) = %q, want %q", tc.store, got, tc.want)
		}
		for _, secret := range []string{"secret", "one", "two", "three", "four", "again", "a%26b"} {
			if strings.Contains(got, secret) {
				t.Errorf("storeName(%q) = %q shows %q", tc.store, got, secret)
			}
		}
	}
}

// Issue 35 item 8: a store URL that carries a password draws a warning that names
// PGPASSWORD and .pgpass; one without, or a file, draws none.
func TestStorePasswordWarning(t *testing.T) {
	for _, tc := range []struct {
		store string
		warn  bool
	}{
		{"tasks.jsonl", false},
		{"postgres://u@h/db", false},
		{"postgres://u@h/db?sslmode=disable&passfile=/p", false},
		{"postgres://u:secret@h/db", true},
		{"postgres://u:@h/db", true},
		{"postgres://u@h/db?password=secret", true},
		{"postgresql://u@h/db?SSLPassword=secret", true},
	} {
		w := storePasswordWarning(tc.store)
		if (w != "") != tc.warn {
			t.Errorf("storePasswordWarning(%q) = %q, want a warning: %t", tc.store, w, tc.warn)
		}
		if w != "" && (!strings.Contains(w, "PGPASSWORD") || !strings.Contains(w, ".pgpass") || strings.Contains(w, "secret")) {
			t.Errorf("storePasswordWarning(%q) = %q", tc.store, w)
		}
	}
}

// Issue 35 item 8: serve and tasks, given a store URL with passwords, print and log it
// masked, warn on stderr, and show no password anywhere, also when the database does not
// answer.
func TestStorePasswordsNeverShown(t *testing.T) {
	const store = "postgres://u:userinfo-secret@127.0.0.1:1/db?password=query-secret&sslpassword=key-secret&connect_timeout=1&sslmode=disable"
	secrets := []string{"userinfo-secret", "query-secret", "key-secret"}
	check := func(what, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows %q:\n%s", what, s, text)
			}
		}
	}

	code, out, errOut := runCmd(t, "tasks", "-store", store)
	if code != exitFail || !strings.Contains(errOut, "asyncagents tasks: warning: the -store URL carries a password") {
		t.Errorf("tasks: exit %d\n%s%s", code, out, errOut)
	}
	check("tasks", out+errOut)

	// serve warns before it connects to OpenCode (here nothing answers at -url).
	_, args := stateArgs(t)
	code, out, errOut = runCmd(t, append(append([]string{"serve"}, args...), "-url", "http://127.0.0.1:1", "-store", store)...)
	if code != exitFail || !strings.Contains(errOut, "warning: the -store URL carries a password") ||
		!strings.Contains(errOut, `store="`+storeName(store)+`"`) {
		t.Errorf("serve: exit %d\n%s%s", code, out, errOut)
	}
	check("serve", out+errOut)

	var printed strings.Builder
	printServing(&printed, serveConfig{url: "http://127.0.0.1:4096", prefix: "asyncagents", store: store}, "1.0", "http://127.0.0.1:9", "?login=x", false)
	if !strings.Contains(printed.String(), "task store:   "+storeName(store)) {
		t.Errorf("serve prints the store as:\n%s", printed.String())
	}
	check("serve's banner", printed.String())
}
