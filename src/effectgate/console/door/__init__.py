"""What stands at the console's door: the CSRF checks and the sign-in throttle."""
