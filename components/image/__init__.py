"""The training image's build definition: Dockerfile, buildspec.yml, build and install scripts, pins.env, the tag."""
