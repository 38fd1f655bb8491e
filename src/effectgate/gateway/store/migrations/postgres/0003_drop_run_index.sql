-- Every list by run also names the tenant, so actions_tenant_run_created (0002) serves it; the
-- run-only index was one more B-tree page written (and fsynced) by every new action.
DROP INDEX IF EXISTS actions_run;
