"""Leaderboard evals: `areal eval` (n samples per problem, scored by the reward service, stored with a
manifest, resumable), the metrics (pass@k, avg@n, maj@k with standard errors), the results store and
`areal leaderboard`. See docs/eval.md."""
