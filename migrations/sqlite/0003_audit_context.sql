-- Who called a tool from outside: the service context of the HTTP tool API
-- and MCP. Rows of the game loop leave these empty.
ALTER TABLE audit ADD COLUMN site_id TEXT;
ALTER TABLE audit ADD COLUMN span_id TEXT;
ALTER TABLE audit ADD COLUMN user_id TEXT;
-- The trace ledger: every row of one trace, for its tenant.
CREATE INDEX audit_by_trace ON audit (tenant_id, trace_id, audit_id);
