"""`make run`: a development gateway that shows the product, and `effectgate dev trigger` to make
things happen to it (see `effectgate_lab.dev`)."""
