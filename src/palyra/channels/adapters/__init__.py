"""Platform adapters: verify and parse a delivery, send a reply (Slack, Standard Webhooks,
Telegram, Discord)."""

from palyra.channels.adapters.discord import DiscordSink
from palyra.channels.adapters.slack import SlackSink
from palyra.channels.adapters.standard_webhooks import WebhookSink
from palyra.channels.adapters.telegram import BotApi, TelegramSink
from palyra.channels.config import ChannelsConfig

SinkT = SlackSink | WebhookSink | TelegramSink | DiscordSink


def build_sinks(config: ChannelsConfig) -> dict[str, SinkT]:
    """One reply sink per configured adapter that can reply, keyed by its channel id."""
    sinks: dict[str, SinkT] = {}
    for name, slack_app in config.slack.items():
        if slack_app.bot_token:
            sinks[f"slack:{name}"] = SlackSink(f"slack:{name}", slack_app.api_base_url,
                                               slack_app.bot_token,
                                               rate_per_s=slack_app.rate_per_s)
    for name, hook in config.webhooks.items():
        if hook.reply_url:
            sinks[f"webhook:{name}"] = WebhookSink(f"webhook:{name}", hook.reply_url,
                                                   hook.signing_secret, rate_per_s=hook.rate_per_s)
    for name, bot in config.telegram.items():
        sinks[f"telegram:{name}"] = TelegramSink(
            f"telegram:{name}", BotApi(bot.api_base_url, bot.bot_token),
            rate_per_s=bot.rate_per_s)
    for name, app in config.discord.items():
        sinks[f"discord:{name}"] = DiscordSink(f"discord:{name}", app.api_base_url,
                                               app.bot_token, rate_per_s=app.rate_per_s)
    return sinks


def reply_caps(sinks: dict[str, SinkT]) -> dict[str, int]:
    """The platforms' own limits on one message, per sink that has one."""
    return {name: sink.max_chars for name, sink in sinks.items()
            if isinstance(sink, TelegramSink | DiscordSink)}
