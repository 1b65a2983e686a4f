"""A second app, unrelated to the example: a team's `images` queue whose `make_thumbnail` job uses a resource of
every kind. Tests prove it synthesizes, provisions and runs without a line of the framework changed."""
