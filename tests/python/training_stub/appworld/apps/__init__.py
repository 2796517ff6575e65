APP_TO_DESCRIPTION = {
    "api_docs": "An app to search and explore API documentation.",
    "supervisor": (
        "An app to access supervisor's personal information, account credentials, "
        "addresses, payment cards, and manage the assigned task."
    ),
    "spotify": "A music streaming app to stream songs and manage song, album and playlist libraries.",
}


def get_all_apps(skip_admin: bool = False) -> list[str]:
    apps = list(APP_TO_DESCRIPTION)
    return apps if skip_admin else ["admin", *apps]
