// Package fork builds the context a forked background task inherits from its parent session
// (SPEC §2): it slices the parent's messages at the latest compaction boundary, cuts tool
// results by recency tier, formats the messages as text, enforces a character budget, and
// writes a preamble that tells the child what was cut.
//
//	msgs (GET /session/{id}/message)
//	  → Slice            latest compaction boundary (F-1 … F-4)
//	  → tiers and cuts   newest 5 whole, next 10 at 3,000 characters, the rest at 500 (F-5 … F-11)
//	  → format           <inherited_context> User:/Agent: blocks </inherited_context> (F-12)
//	  → budget           oldest blocks dropped, at most 200,000 characters (F-13)
//	  → Result           Context, Preamble (F-16), Stats (F-15)
//
// Lengths are characters (runes); no cut splits a UTF-8 sequence. The pipeline is linear in
// its input (F-14): every block is formatted once, and dropping blocks for the budget moves
// an offset. A Pipeline is immutable and safe for concurrent use; it starts no goroutines.
package fork
