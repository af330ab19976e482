"""`areal plan` (issue 23): the production controller on a simulated cluster, time advanced by cost models."""
