package opencodetest_test

import (
	"testing"

	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The same checks against the in-memory fake and the real server keep the fake honest; run
// through an HTTPServer, they hold its wire format to what HTTPClient reads. The
// directory check is T-4a's ground: a session runs in the directory it was created in.
func TestClientConformance(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		f := opencodetest.NewFakeClient()
		defer f.Close()
		h := opencodetest.Harness{Directory: f.Directory(), Requests: f.Requests, OtherDirectory: "/opencodetest/other"}
		if err := opencodetest.TestClient(t.Context(), f, h); err != nil {
			t.Error(err)
		}
	})
	t.Run("fake over http", func(t *testing.T) {
		t.Parallel()
		f := opencodetest.NewFakeClient()
		defer f.Close()
		srv := opencodetest.NewHTTPServer(f)
		defer srv.Close()
		h := opencodetest.Harness{Directory: f.Directory(), Requests: f.Requests, OtherDirectory: "/opencodetest/other"}
		if err := opencodetest.TestClient(t.Context(), srv.Client(), h); err != nil {
			t.Error(err)
		}
	})
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		srv := shared.Get(t)
		other, err := srv.NewProject("other")
		if err != nil {
			t.Fatal(err)
		}
		h := opencodetest.Harness{Directory: srv.Directory, Requests: srv.Model.Requests, OtherDirectory: other}
		if err := opencodetest.TestClient(t.Context(), srv.Client(), h); err != nil {
			t.Error(err)
		}
	})
}
