"""``weather.current``: a temperature no model would guess (37.4 C).

The tool is R0, so its worker's directory is read-only: it writes nothing,
and the number in the model's answer is the proof it ran."""

from __future__ import annotations

from naga_plugins import Plugin

plugin = Plugin("weather")


@plugin.tool("weather.current")
def current(city: str) -> dict[str, object]:
    return {"city": city, "temperature_c": 37.4}


main = plugin.main
