package leader

// ConnectionID returns the CONNECTION_ID() of the leader's pinned connection, 0 when not
// leading, so that tests can KILL it from outside.
func (e *MySQLElector) ConnectionID() int64 { return e.connID.Load() }
