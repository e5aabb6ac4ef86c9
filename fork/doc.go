// Package fork builds the context a forked background task inherits from its parent
// session: it slices the parent's messages at the latest compaction boundary, cuts tool
// results by how recent they are, formats the messages as text, keeps the whole within a
// character budget, and writes a preamble that tells the child what was cut.
//
//	msgs (GET /session/{id}/message, oldest first)
//	  → Slice            from the latest compaction summary on
//	  → tiers and cuts   newest 5 results whole, next 10 cut to 3,000 characters, the rest to 500
//	  → format           <inherited_context> User:/Agent: blocks </inherited_context>
//	  → budget           oldest blocks dropped until at most 200,000 characters
//	  → Result           Context, Preamble, Stats
//
// The numbers are the defaults; options passed to [New] change them. [Pipeline.Run] does
// all of it on the whole parent; [Pipeline.RunPages] does the same on a parent read page by
// page, newest first ([SessionPages] reads the pages from an OpenCode server), and stops
// reading as soon as older messages can no longer change the context: past the latest
// compaction boundary, or once the budget is full. [Slice] and [LatestBoundary] expose the
// first step.
//
// Lengths are characters (Unicode code points, Go runes), never bytes; no cut splits a
// UTF-8 sequence (see package [truncate]). The pipeline is linear in its input: blocks are
// formatted newest first, once each, and the blocks the budget drops are counted, not
// formatted. A [Pipeline] is immutable and safe for concurrent use; the package starts no
// goroutines.
package fork
