-- No query reads sessions by tenant (a tenant's live sessions are listed
-- from the hub's memory), and the index cost every creation a page of its
-- own in the commit.
DROP INDEX IF EXISTS sessions_by_tenant;
