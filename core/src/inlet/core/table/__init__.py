"""Table state: hoodie.properties, the parsed table meta, and the HudiTable facade."""
