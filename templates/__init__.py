"""Jinja2 templates for every comment the bot writes and for generated plans and workflow files."""
