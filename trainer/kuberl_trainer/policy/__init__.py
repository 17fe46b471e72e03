"""Policies: the paper's policy graphs (model, loss, postprocessing). All torch code lives here."""
