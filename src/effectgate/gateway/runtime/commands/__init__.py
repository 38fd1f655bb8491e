"""Commands that read and mend the store directly, with no gateway running (`effectgate notify`),
and the `--config` option every command that reads the config shares (`config_option`)."""
