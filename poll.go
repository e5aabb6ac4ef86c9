package asyncagents

// pollLoop reconciles with GET /session/status every poll interval: one request per
// directory; a message read only for a task whose session left the busy map since the last
// poll.
func (m *Manager) pollLoop() {
	for m.wait(m.cfg.poll) {
		m.poll()
	}
}

func (m *Manager) poll() {
	defer m.recoverAndLog("the status poll")
	m.mu.Lock()
	dirs := map[string][]string{}
	var expired []watchdog
	now := m.now()
	for id, e := range m.tasks {
		if !e.task.Status.Active() {
			continue
		}
		if w, ok := m.expiredLocked(e, now); ok {
			expired = append(expired, w)
			continue
		}
		dirs[e.task.Directory] = append(dirs[e.task.Directory], id)
	}
	m.mu.Unlock()
	for _, w := range expired {
		m.expire(w)
	}
	m.catchUpPermissions(true)
	m.checkPosted()
	for dir, ids := range dirs {
		ctx, cancel := m.quickCtx()
		st, err := m.client.SessionStatus(ctx, dir)
		cancel()
		if err != nil {
			if m.ctx.Err() == nil {
				m.cfg.logger.Warn("asyncagents: poll session status", "directory", dir, "err", err)
			}
			continue
		}
		m.mu.Lock()
		for _, id := range ids {
			e := m.tasks[id]
			if e == nil || !e.task.Status.Active() {
				continue
			}
			if s, busy := st[id]; busy {
				if s != e.polled { // a change seen by the poll is activity
					e.polled, e.active = s, m.now()
				}
				if s.Type == "retry" {
					e.retry = s.Message
				}
				m.busyLocked(e)
			} else if now := m.now(); !now.Before(e.recheckAt) {
				// Idle and undecided: read it now and again later, less and less often, so
				// a run that starts late or ends between two polls is never left behind.
				e.recheckDelay = min(max(2*e.recheckDelay, m.cfg.poll), maxRecheck)
				e.recheckAt = now.Add(e.recheckDelay)
				m.enqueueLocked(id, true)
			}
		}
		m.mu.Unlock()
	}
}
