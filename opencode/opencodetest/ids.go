package opencodetest

import (
	"encoding/hex"
	"math/rand/v2"
	"time"
)

// idGen makes OpenCode ids the way OpenCode's Identifier.create does: a prefix, "_", 12 hex
// digits of (epoch milliseconds × 4096 + a counter that restarts every millisecond) and 14
// base62 characters. Ascending ids (messages, parts, events, permissions) sort in creation
// order; descending ids (sessions) have the number inverted, so the newest sorts first. The
// random characters come from a fixed seed, so a fake with a fixed clock makes the same ids on
// every run. Not safe for concurrent use.
type idGen struct {
	last    int64
	counter int64
	rng     *rand.Rand
}

func newIDGen() *idGen { return &idGen{rng: rand.New(rand.NewPCG(0x0c0de, 0x5e55)), last: -1} }

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// next returns a new id with prefix ("ses", "msg", "prt", "per", "evt") made at now.
func (g *idGen) next(prefix string, descending bool, now time.Time) string {
	ms := now.UnixMilli()
	if ms != g.last {
		g.last, g.counter = ms, 0
	}
	g.counter++
	v := uint64(ms)*0x1000 + uint64(g.counter)
	if descending {
		v = ^v
	}
	var b [6]byte
	for i := range b {
		b[i] = byte(v >> (40 - 8*i))
	}
	out := make([]byte, 0, len(prefix)+1+12+14)
	out = append(out, prefix...)
	out = append(out, '_')
	out = hex.AppendEncode(out, b[:])
	for range 14 {
		out = append(out, base62[g.rng.IntN(len(base62))])
	}
	return string(out)
}

// word returns one of words, chosen by the generator's random source.
func (g *idGen) word(words []string) string { return words[g.rng.IntN(len(words))] }
