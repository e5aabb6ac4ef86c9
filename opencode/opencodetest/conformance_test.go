package opencodetest_test

import (
	"testing"

	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The same checks against the in-memory fake and the real server keep the fake honest.
func TestClientConformance(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		f := opencodetest.NewFakeClient()
		defer f.Close()
		if err := opencodetest.TestClient(t.Context(), f, opencodetest.Harness{Directory: f.Directory(), Requests: f.Requests}); err != nil {
			t.Error(err)
		}
	})
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		srv := shared.Get(t)
		h := opencodetest.Harness{Directory: srv.Directory, Requests: srv.Model.Requests}
		if err := opencodetest.TestClient(t.Context(), srv.Client(), h); err != nil {
			t.Error(err)
		}
	})
}
