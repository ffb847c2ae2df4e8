"""Who may call and how much: API keys, rate limits and admission."""
