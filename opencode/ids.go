package opencode

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// NewMessageID returns a message id in OpenCode's form — "msg_", 12 hex digits of
// milliseconds·4096 plus a counter (its low 48 bits, as OpenCode writes it), 14 base62
// characters — for the time now, and newer than after (an id of the same form, "" for none).
// OpenCode 1.18.33 orders a session's messages, in its listings and in its agent loop, by the
// time the server created them, then by id: the id of a message created with it
// ([PromptRequest.MessageID]) places it only among messages created in the same millisecond,
// and newer than after it sorts after them (older servers ordered by id alone). Its counter
// is 0 (unless after forces more): OpenCode's counter starts at 1 in every millisecond, so the
// replies the server writes to such a message, even in the same millisecond, sort after it,
// as long as the client's clock is not ahead of the server's (the same host, or synchronised
// clocks).
func NewMessageID(now time.Time, after string) string {
	r := rand.Uint64()     // math/rand/v2's generator: unpredictable enough for an id, and no system call
	const mask = 1<<48 - 1 // OpenCode keeps the low 48 bits; compare what is written
	v := (uint64(now.UnixMilli()) << 12) & mask
	if len(after) >= 16 && after[:4] == "msg_" {
		if last, err := strconv.ParseUint(after[4:16], 16, 64); err == nil && v <= last {
			v = (last + 1) & mask
		}
	}
	const hex, base62 = "0123456789abcdef", "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var id [4 + 12 + 14]byte
	copy(id[:], "msg_")
	for i := range 12 {
		id[4+i] = hex[v>>(44-4*i)&15]
	}
	r2 := rand.Uint64()
	for i := range 14 {
		if i == 7 {
			r = r2
		}
		id[16+i] = base62[r%62]
		r /= 62
	}
	return string(id[:])
}

// PartID returns the id of the part of message messageID named name: "prt_", the message id
// after its "msg_", then name (ASCII letters and digits). The same message id and name give
// the same id, so a prompt posted again with its parts' ids replaces its parts instead of
// adding them ([TextPartInput.ID]); OpenCode orders a message's parts by id, so the parts of
// one message sort by name.
func PartID(messageID, name string) string {
	return "prt_" + strings.TrimPrefix(messageID, "msg_") + name
}
