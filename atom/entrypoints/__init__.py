"""The launchers of the network server: above the builder, which they call."""
