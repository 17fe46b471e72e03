"""kuberl_api."""
