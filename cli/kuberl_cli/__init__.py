"""kuberl_cli."""
