SELECT key, value FROM dreaming_config;
