"""The commands beside `serve`, each reading and mending the store or a provider directly, with no
gateway running (`effectgate migrate`, `audit`, `audit verify`, `notify`), and the `--config` option
every command that reads the config shares (`config_option`)."""
