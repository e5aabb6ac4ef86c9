package fork_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// A parent session with a compaction: only the summary and what follows it are inherited.
func ExamplePipeline_Run_compaction() {
	msgs := []opencode.Message{
		{Info: opencode.MessageInfo{ID: "msg_1", Role: "user"}, Parts: []opencode.Part{{Type: "text", Text: "old question"}}},
		{Info: opencode.MessageInfo{ID: "msg_2", Role: "user"}, Parts: []opencode.Part{{Type: "compaction"}}},
		{Info: opencode.MessageInfo{ID: "msg_3", Role: "assistant", Summary: json.RawMessage("true")},
			Parts: []opencode.Part{{Type: "text", Text: "Summary: we fixed the build."}}},
		{Info: opencode.MessageInfo{ID: "msg_4", Role: "user"}, Parts: []opencode.Part{{Type: "text", Text: "Now add tests."}}},
	}
	p, _ := fork.New()
	r := p.Run(msgs)
	fmt.Printf("messages: %d before, %d after; summary at %d\n", r.Stats.OriginalMessages, r.Stats.FinalMessages, r.Stats.CompactionIndex)
	fmt.Println(r.Context)
	// Output:
	// messages: 4 before, 2 after; summary at 2
	// <inherited_context>
	// Agent:
	// Summary: we fixed the build.
	// User:
	// Now add tests.
	// </inherited_context>
}

// Twenty large tool results: the newest 5 stay whole, the next 10 are cut to 3,000
// characters and the oldest 5 to 500.
func ExamplePipeline_Run_tiers() {
	var msgs []opencode.Message
	for i := range 20 {
		msgs = append(msgs, opencode.Message{
			Info: opencode.MessageInfo{ID: fmt.Sprintf("msg_%02d", i), Role: "assistant"},
			Parts: []opencode.Part{{Type: "tool", Tool: "read", State: &opencode.ToolState{
				Status: "completed", Input: json.RawMessage(`{"filePath":"f.go"}`), Output: strings.Repeat("x", 5000)}}},
		})
	}
	p, _ := fork.New()
	r := p.Run(msgs)
	fmt.Printf("tiers %d/%d/%d, %d results cut, context %d characters (from %d characters of output)\n",
		r.Stats.Tier1, r.Stats.Tier2, r.Stats.Tier3, r.Stats.TruncatedResults, r.Stats.TotalChars, 20*5000)
	// Output:
	// tiers 5/10/5, 15 results cut, context 59075 characters (from 100000 characters of output)
}

// A long parent read page by page, newest first: the pipeline stops at the compaction, so
// the thousand older messages are never read. In a Manager the pages come from the server:
// fork.SessionPages(client, parentID).
func ExamplePipeline_RunPages() {
	var msgs []opencode.Message
	for i := range 1000 {
		msgs = append(msgs, opencode.Message{Info: opencode.MessageInfo{ID: fmt.Sprintf("msg_%04d", i), Role: "user"},
			Parts: []opencode.Part{{Type: "text", Text: "old question"}}})
	}
	msgs = append(msgs,
		opencode.Message{Info: opencode.MessageInfo{ID: "msg_1000", Role: "user"}, Parts: []opencode.Part{{Type: "compaction"}}},
		opencode.Message{Info: opencode.MessageInfo{ID: "msg_1001", Role: "assistant", Summary: json.RawMessage("true")},
			Parts: []opencode.Part{{Type: "text", Text: "Summary: we fixed the build."}}},
		opencode.Message{Info: opencode.MessageInfo{ID: "msg_1002", Role: "user"}, Parts: []opencode.Part{{Type: "text", Text: "Now add tests."}}},
	)
	pages, end := 0, len(msgs)
	next := func(context.Context) ([]opencode.Message, bool, error) { // pages of two, newest first
		pages++
		start := max(0, end-2)
		page := msgs[start:end]
		end = start
		return page, start > 0, nil
	}

	p, _ := fork.New()
	r, err := p.RunPages(context.Background(), next)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("read %d of %d messages in %d pages; summary at %d of those\n", r.Stats.OriginalMessages, len(msgs), pages, r.Stats.CompactionIndex)
	fmt.Println(r.Context == p.Run(msgs).Context)
	// Output:
	// read 3 of 1003 messages in 2 pages; summary at 1 of those
	// true
}
