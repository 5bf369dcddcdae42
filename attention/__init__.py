"""attention: multi-head attention over token graphs with switchable residual signals (issue: attention)."""
