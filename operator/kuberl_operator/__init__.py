"""kuberl_operator."""
