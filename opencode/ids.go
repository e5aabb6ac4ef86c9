package opencode

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
)

// NewMessageID returns a message id in OpenCode's form — "msg_", 12 hex digits of
// milliseconds·4096 plus a counter (its low 48 bits, as OpenCode writes it), 14 base62
// characters — for the time now, and newer than
// after (an id of the same form, "" for none), so that a message created with it
// ([PromptRequest.MessageID]) sorts after the session's messages even when the server's
// clock is ahead.
func NewMessageID(now time.Time, after string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	const mask = 1<<48 - 1 // OpenCode keeps the low 48 bits; compare what is written
	v := (uint64(now.UnixMilli())<<12 | uint64(binary.BigEndian.Uint16(b[:2])&0xfff)) & mask
	if len(after) >= 16 && after[:4] == "msg_" {
		if last, err := strconv.ParseUint(after[4:16], 16, 64); err == nil && v <= last {
			v = (last + 1) & mask
		}
	}
	const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	id := []byte(fmt.Sprintf("msg_%012x", v))
	for _, c := range b[2:] {
		id = append(id, base62[int(c)%len(base62)])
	}
	return string(id)
}
