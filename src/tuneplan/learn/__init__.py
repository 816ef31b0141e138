"""Learning from measured runs: calibration files, learners (kavier, xia, slst, tuneplan), intervals."""
