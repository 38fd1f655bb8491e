"""The data every wing shares: the action record and its states, keys, the protocol's errors."""
