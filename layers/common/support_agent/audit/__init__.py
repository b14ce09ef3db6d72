"""The audit trail's own logic, beside the stores that write it: each stream's hash chain (chain.py), its heads
sealed in S3 out of the table writers' reach (seal.py), and the watcher that calls any change to a written row
tampering (watch.py).

It sits just below store/ (docs/ARCHITECTURE.md): the stores' writers chain their rows with chain.py, and nothing
here imports a store. The Audit table's row and repository (`AuditRecord`, `AuditStore`) and the one builder of
an audited write (`AuditedWrite`) are DynamoDB code, so they are store/'s (store/audit.py,
store/audited_write.py).
"""
