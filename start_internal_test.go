package asyncagents

import (
	"context"
	"slices"
	"testing"

	"github.com/asyncagents/asyncagents/opencode"
)

// A fork reads the caller up to its launching message: cutPages leaves out the messages newer
// than the cut, over page boundaries and past pages left empty, and cuts nothing without one.
func TestCutPagesStopsAtTheLaunchingMessage(t *testing.T) {
	msg := func(id string) opencode.Message { return opencode.Message{Info: opencode.MessageInfo{ID: id}} }
	pages := func() func(context.Context) ([]opencode.Message, bool, error) {
		all := [][]opencode.Message{{msg("msg_7"), msg("msg_8")}, {msg("msg_4"), msg("msg_5"), msg("msg_6")}, {msg("msg_1"), msg("msg_2")}}
		return func(context.Context) ([]opencode.Message, bool, error) {
			p := all[0]
			all = all[1:]
			return p, len(all) > 0, nil
		}
	}
	read := func(cut string) []string {
		next := cutPages(pages(), cut)
		var ids []string
		for more := true; more; {
			var page []opencode.Message
			var err error
			if page, more, err = next(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, m := range page {
				ids = append(ids, m.Info.ID)
			}
		}
		return ids
	}
	for cut, want := range map[string][]string{
		"msg_5": {"msg_4", "msg_5", "msg_1", "msg_2"},
		"msg_8": {"msg_7", "msg_8", "msg_4", "msg_5", "msg_6", "msg_1", "msg_2"},
		"":      {"msg_7", "msg_8", "msg_4", "msg_5", "msg_6", "msg_1", "msg_2"},
	} {
		if got := read(cut); !slices.Equal(got, want) {
			t.Errorf("cut %q: read %v, want %v", cut, got, want)
		}
	}
}
