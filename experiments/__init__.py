"""experiments: the pdmm-bridge command line and experiment runner."""
