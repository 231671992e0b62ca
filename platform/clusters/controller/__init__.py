"""The cluster controller: one active per cluster, elected by a lease row in the database."""
