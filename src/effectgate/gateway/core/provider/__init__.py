"""What providers say on their own: signed reports applied to actions, and the read lags they show."""
