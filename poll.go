package asyncagents

// pollLoop reconciles with GET /session/status every poll interval: one request per
// directory; a message read only for a task whose session left the busy map since the last
// poll.
func (m *Manager) pollLoop() {
	for m.bg.wait(m.cfg.poll) {
		m.poll()
	}
}

func (m *Manager) poll() {
	defer m.bg.recoverAndLog("the status poll")
	m.mu.Lock()
	dirs := map[string][]string{}
	var expired []watchdog
	now := m.bg.now()
	for id, e := range m.tasks.byID {
		if !e.task.Status.Active() || e.task.Starting { // its start decides
			continue
		}
		if w, ok := e.expired(now, m.cfg.stale); ok {
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
		ctx, cancel := m.bg.quickCtx()
		st, err := m.client.SessionStatus(ctx, dir)
		cancel()
		if err != nil {
			if m.bg.ctx.Err() == nil {
				m.cfg.logger.Warn("asyncagents: poll session status", "directory", dir, "err", err)
			}
			continue
		}
		m.mu.Lock()
		for _, id := range ids {
			e := m.tasks.byID[id]
			if e == nil || !e.task.Status.Active() {
				continue
			}
			if s, busy := st[e.task.SessionID]; busy {
				if s != e.run.polled { // a change seen by the poll is activity
					e.run.polled, e.run.active = s, m.bg.now()
				}
				if s.Type == "retry" {
					e.run.retry = s.Message
				}
				e.run.busy()
			} else if now := m.bg.now(); !now.Before(e.run.recheckAt) {
				// Idle and undecided: read it now and again later, less and less often, so
				// a run that starts late or ends between two polls is never left behind.
				e.run.recheckDelay = min(max(2*e.run.recheckDelay, m.cfg.poll), maxRecheck)
				e.run.recheckAt = now.Add(e.run.recheckDelay)
				m.recon.enqueue(e, true)
			}
		}
		m.mu.Unlock()
	}
}
