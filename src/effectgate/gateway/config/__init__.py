"""The configuration: the TOML file parsed into typed settings, with errors a person can act on."""
