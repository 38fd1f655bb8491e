"""The effect core: the state machine, the moves, the driver, the effect protocol and its operator verbs."""
