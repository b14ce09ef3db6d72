"""Daily rollups of the conversations' outcomes, refunds, hand-offs and ratings, and the leads' reports on them
(docs/OPERATIONS.md, "Reading the reports")."""
