// Package dashboard is a live status API and page for the tasks of an
// [asyncagents.Manager]: an [http.Handler] that a host mounts on its own server.
//
//	h, err := dashboard.New(m, dashboard.WithToken(token))
//	defer h.Close()
//	mux.Handle("/tasks/", http.StripPrefix("/tasks", h)) // or serve h at the root
//	fmt.Println("http://127.0.0.1:PORT/tasks/" + h.LoginLink()) // for the user, once
//
// The page and the API use relative URLs, so the handler works under any prefix, as long
// as the page is opened at the prefix with its trailing slash.
//
// # Routes
//
//	GET  /                        the page: one self-contained HTML file, live through /api/events
//	GET  /?login=<code>           trades a login link's code for a session cookie, then
//	                              redirects (303) to ./ ([Handler.LoginLink])
//	GET  /api/tasks               {"tasks": [task, …]}: every task of the Manager, in the order
//	                              of Manager.ListAll; ?parent=<session id> and ?status=<status>
//	                              filter
//	GET  /api/tasks/{id}          one task; {id} is its full id, the id without "tsk_", or its session's id
//	POST /api/tasks/{id}/cancel   cancels a queued, running or resumed task for its parent
//	                              session (Manager.Cancel); answers the task
//	GET  /api/events              server-sent events, see below
//	POST /api/login-link          {"link": "?login=<code>", "expires": <RFC 3339 time>}: a
//	                              new login link, for a program that holds the token
//	POST /api/logout              ends the request's session and clears its cookie; 204
//
// Errors are JSON, {"error": "<a short message>"}, with the status: 400 for a malformed id,
// parent or status, and for a page address with ?token=; 401 for a missing or wrong token
// or session (with WWW-Authenticate: Bearer) and for a login code that is used, expired
// or unknown (an HTML page when the request accepts text/html); 403 for a Host that is
// not allowed (see below), a cancel of a read-only handler ([WithReadOnly]), a
// cross-origin POST ([http.CrossOriginProtection]) or a login link asked for by a
// session; 404 for an unknown task or route; 405 for a wrong method (with Allow); 409 for
// a cancel of a task that is not queued, running or resumed; 502 when the OpenCode server
// failed the cancel; 503 when the Manager or the handler is closed, or for an event
// stream beyond [WithMaxStreams] (with Retry-After).
//
// # Task fields
//
// A task is the JSON form of [asyncagents.Task] — its json tags are the field names, and
// they are stable — plus two fields the Manager computes for the copies it returns:
//
//	id, parentSessionID, parentMessageID, parentAgent, directory, description, prompt,
//	agent, model ("providerID/modelID"), status (queued, running, resumed, completed, error,
//	cancelled), started, completed, retrieved (RFC 3339 times; the last two absent while
//	zero), result, error, batchID, resumeCount, followUps, forked, depth,
//	deadline (nanoseconds; absent without one),
//	progress {toolCalls, tools {name: calls}, lastTools [≤ 3 names, oldest first], updated},
//	forkStats {original_messages, final_messages, compaction_detected, compaction_index,
//	tier1, tier2, tier3, truncated_results, head_tail_applied, removed_messages,
//	total_chars, budget_clipped} (forked tasks only; see fork.Stats),
//	permission {id, permission, patterns} (while the session waits for an answer),
//	notifications [{key, state (pending, delivered, failed), visible, hidden, messageID,
//	attempts, created, next, delivered, error}] (see asyncagents.Notification),
//	displayID (the shortest unique prefix of id among the parent's tasks),
//	queuePosition (from 1, while queued; absent otherwise).
//
// Fields with omitempty or omitzero tags are absent when empty.
//
// # Events
//
// GET /api/events is a stream of server-sent events (text/event-stream). Each event has an
// id, "<epoch>-<n>": the epoch names the handler's current subscription to the Manager and
// n counts its changes. There are two events:
//
//	event: snapshot   data: {"time": <the server's clock>, "readOnly": bool, "tasks": [task, …]}
//	event: change     data: {"seq": <the Manager's change number>, "task": task, "removed": true?}
//
// A stream starts with a snapshot, then sends one change per change of a task (a new task,
// a status, a counted tool call, a permission request or answer, a follow-up, a
// notification's progress, a removal), in order and without gaps; a removal carries the
// task as it was. A client that reconnects with the id of the last event it got
// (the Last-Event-ID header, which browsers send by themselves, or ?lastEventId=) gets the
// changes it missed and nothing else, as long as the handler still holds them
// ([WithHistory]); when it does not, or the id is of another epoch (the host restarted,
// or the handler fell behind the Manager and subscribed again), it gets a snapshot first.
// A client applies a snapshot by replacing its tasks and a change by replacing or removing
// one task. Comment lines (": heartbeat") come when the stream is otherwise idle
// ([WithHeartbeat]).
//
// Fields computed by the Manager (displayID, queuePosition) are as of the task's last
// change: the queue position of a task whose predecessor started is not sent again.
//
// # Authentication
//
// With [WithToken], every route but the page and the logout needs a credential: the
// token, as "Authorization: Bearer <token>", for programs; or a session cookie, for the
// page. A session starts from a login link ([Handler.LoginLink], or POST /api/login-link
// with the token): "?login=<code>" appended to the page's address, good for one GET
// within [WithLoginTTL] ([DefaultLoginTTL]). Opening it sets the cookie and redirects
// to the page without the code in its address (Referrer-Policy: no-referrer,
// Cache-Control: no-store). The token is never accepted in a URL.
//
// The cookie is named after the port ("asyncagents_dashboard_4097": browsers send a host's
// cookies to all its ports), scoped to the API's path ("/api/" under the host's prefix),
// HttpOnly and SameSite=Strict, and holds 256 random bits that name a session the handler
// keeps in memory as a hash. Sessions end when the process does, after an idle time and a
// lifetime ([WithSessionTimeout]: [DefaultSessionIdle], [DefaultSessionLifetime]), and on
// POST /api/logout; an open event stream ends with its session. At most [MaxSessions]
// sessions and [MaxLoginLinks] unused links are kept; more forget the oldest. A session
// reads and cancels tasks as the token does, but cannot mint login links.
//
// [WithMiddleware] wraps the whole handler for authentication by the host instead, or as
// well. Without either, anyone who can reach the handler can read the tasks and cancel
// them: serve it on a loopback address only. POST requests from another origin are
// refused in every mode.
//
// On a loopback address, the handler also checks the Host header, in every mode: a request
// whose Host names anything but localhost, a loopback IP or a host of [WithAllowedHosts]
// (any port) is answered 403, so that a web page whose name was re-bound to 127.0.0.1
// (DNS rebinding) can neither read nor cancel tasks. [WithAnyHost] turns the check off.
//
// # Goroutines
//
// A Handler is safe for concurrent use. It owns one goroutine, which reads the Manager's
// changes ([asyncagents.Manager.Subscribe]) into a bounded history; each event stream is
// served on its request's goroutine and reads that history, so the Manager never waits for
// the handler and the handler never waits for a client: a client that falls behind by
// more than the history gets a snapshot, one that stops reading is cut off when a write
// times out. At most [WithMaxStreams] streams are open at once ([DefaultMaxStreams]). An
// idle stream holds no copy of the snapshot it sent, and it outlives the ReadTimeout and
// WriteTimeout of the [http.Server] (each of its writes sets its own deadline).
// [Handler.Close] stops the goroutine and ends the streams. When the Manager is closed
// the streams end and the API answers 503.
package dashboard
