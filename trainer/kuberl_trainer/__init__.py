"""kuberl_trainer."""
