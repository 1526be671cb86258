"""Build src/evolm/data/seed_rubrics.jsonl: the hand-written part of the rubric writer's warm-start set.

Every prompt and rubric below was written for evolm by hand (no public data set, no model output):
templated families of everyday requests with verifiable constraints (counts, formats, known answers)
and one-off everyday, explanation and advice prompts. docs/SEED_RUBRICS.md gives the provenance and
the rules they follow. Each rubric fits the rubric grammar (evolm.backends.constrained): 2-4 criteria of at
most 80 characters, weights in tenths that sum to 1, scoring levels "1.0", "0.5", "0.0" of at most
30 characters, ASCII only. Run: python scripts/build_seed_rubrics.py (rewrites the file; deterministic).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "evolm" / "data" / "seed_rubrics.jsonl"


def c(text: str, units: int, full: str, half: str, none: str) -> tuple:
    return (text, units, full, half, none)


ROWS: list[tuple[str, list[tuple]]] = []


def add(prompt: str, *criteria: tuple) -> None:
    ROWS.append((prompt, list(criteria)))


# ----------------------------------------------------------------------------- templated families

BULLET_TOPICS = [
    ("ways to save water at home", "saving water at home"),
    ("reasons to learn a second language", "learning a second language"),
    ("tips for sleeping better", "sleeping better"),
    ("things to pack for a beach day", "a beach day"),
    ("benefits of cycling to work", "cycling to work"),
    ("ideas for a rainy-day activity with kids", "rainy-day activities with kids"),
    ("ways to reduce food waste", "reducing food waste"),
    ("habits that help you study", "studying"),
]
for i, (topic, short) in enumerate(BULLET_TOPICS):
    n = 3 + i % 3
    add(f"Give me exactly {n} bullet points on {topic}.",
        c(f"Has exactly {n} bullet points.", 4, f"Exactly {n} bullets.", "Off by one.", "Other count or no bullets."),
        c(f"Every bullet is about {short}."[:80], 4, "All on topic.", "Some off topic.", "Mostly off topic."),
        c("Each bullet is a short, distinct point (no repeats).", 2, "Short and distinct.", "Some overlap.",
          "Repetitive or long."))

SENTENCE_TOPICS = [
    ("what a volcano is", "Says a volcano is an opening where molten rock (magma) erupts."),
    ("why we have seasons", "Says seasons come from the tilt of Earth's axis."),
    ("what photosynthesis does", "Says plants turn light, water and CO2 into sugar and oxygen."),
    ("how a vaccine works", "Says a vaccine trains the immune system to recognise a germ."),
    ("what inflation is", "Says inflation is a general rise in prices over time."),
    ("why the moon has phases", "Says phases come from how much of the sunlit side we see."),
    ("what a password manager does", "Says it stores passwords securely behind one master password."),
    ("how a rainbow forms", "Says sunlight is refracted and reflected in raindrops."),
]
for i, (topic, key) in enumerate(SENTENCE_TOPICS):
    n = 2 + i % 2
    add(f"Explain {topic} in exactly {n} sentences.",
        c(key, 5, "Stated correctly.", "Vague or partly wrong.", "Missing or wrong."),
        c(f"Has exactly {n} sentences.", 3, f"Exactly {n} sentences.", "Off by one.", "Other count."),
        c("Uses plain words a non-expert understands.", 2, "Plain and clear.", "Some jargon.", "Hard to follow."))

HAIKU_TOPICS = ["the sea at night", "a busy train station", "fresh snow", "a cup of coffee", "a lost cat",
                "spring rain", "a city at dawn", "an old bicycle"]
for topic in HAIKU_TOPICS:
    add(f"Write a haiku about {topic}.",
        c("Has exactly 3 lines.", 3, "Three lines.", "Two or four lines.", "Other."),
        c("Follows 5-7-5 syllables (or close to it).", 3, "5-7-5.", "Off by 1-2 syllables.", "Not close."),
        c(f"Is clearly about {topic}.", 3, "On topic.", "Loosely related.", "Off topic."),
        c("Contains only the poem, no title or explanation.", 1, "Poem only.", "Short extra text.",
          "Long extra text."))

CAPITALS = [("Canada", "Ottawa"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Brazil", "Brasilia"),
            ("Egypt", "Cairo"), ("Norway", "Oslo"), ("Peru", "Lima"), ("Turkey", "Ankara"),
            ("New Zealand", "Wellington"), ("Switzerland", "Bern")]
for i, (country, capital) in enumerate(CAPITALS):
    if i % 2:
        add(f"What is the capital of {country}? Answer in one word.",
            c(f"Gives the answer {capital}.", 7, f"Says {capital}.", "Hedges between cities.", "Wrong city."),
            c("Replies with a single word.", 3, "One word.", "A short phrase.", "Long reply."))
    else:
        add(f"Which city is the capital of {country}?",
            c(f"Names {capital} as the capital of {country}.", 8, f"Says {capital}.", "Hedges between cities.",
              "Wrong city."),
            c("Is short: one or two sentences.", 2, "One or two sentences.", "A paragraph.", "Long essay."))

CONVERSIONS = [
    ("Convert 10 kilograms to pounds.", "Gives about 22.05 pounds (22 is fine).", "Shows 1 kg = about 2.2046 lb."),
    ("How many centimetres are in 4.5 inches?", "Gives about 11.43 cm.", "Uses 1 inch = 2.54 cm."),
    ("Convert 100 degrees Fahrenheit to Celsius.", "Gives about 37.8 degrees Celsius.", "Uses C = (F - 32) x 5/9."),
    ("Convert 25 degrees Celsius to Fahrenheit.", "Gives 77 degrees Fahrenheit.", "Uses F = C x 9/5 + 32."),
    ("How many litres is 3 US gallons?", "Gives about 11.36 litres.", "Uses 1 US gallon = about 3.785 L."),
    ("Convert 2.5 hours to minutes.", "Gives 150 minutes.", "Multiplies by 60."),
    ("How many grams are in 8 ounces?", "Gives about 226.8 grams (227 is fine).", "Uses 1 oz = about 28.35 g."),
    ("Convert 6 feet to metres.", "Gives about 1.83 metres.", "Uses 1 ft = 0.3048 m."),
    ("How many seconds are in a day?", "Gives 86,400 seconds.", "Shows 24 x 60 x 60."),
    ("Convert 500 millilitres to cups (US).", "Gives about 2.1 US cups.", "Uses 1 US cup = about 237 ml."),
]
for prompt, value, method in CONVERSIONS:
    add(prompt,
        c(value, 7, "Correct value.", "Close, rounding off.", "Wrong or missing."),
        c(method, 2, "Factor shown, correct.", "Factor implied.", "Wrong factor."),
        c("States the unit of the result.", 1, "Unit given.", "Unit unclear.", "No unit."))

ARITHMETIC = [("What is 17 x 6?", "102"), ("What is 144 divided by 12?", "12"), ("What is 15% of 80?", "12"),
              ("What is 2 to the power of 10?", "1024"), ("What is 345 + 789?", "1134"),
              ("What is the square root of 169?", "13"), ("What is 1000 - 387?", "613"),
              ("What is 3/4 written as a decimal?", "0.75"), ("What is 12 squared minus 44?", "100"),
              ("Round 3.14159 to two decimal places.", "3.14")]
for prompt, answer in ARITHMETIC:
    add(prompt,
        c(f"Gives the final answer {answer}.", 8, f"Says {answer}.", "Right steps, slip at end.", "Wrong answer."),
        c("States the answer clearly, without a wrong extra result.", 2, "Clear single answer.",
          "Buried in text.", "Conflicting answers."))

LISTS = [
    ("Name three primary colours.", 3, "primary colours",
     "Lists red, yellow and blue (or red, green, blue for light)."),
    ("List four planets of the solar system.", 4, "planets", "Every item is a real planet (Pluto does not count)."),
    ("Name five fruits that are red.", 5, "red fruits", "Every item is a fruit that is usually red."),
    ("List three mammals that live in the ocean.", 3, "ocean mammals", "Every item is a marine mammal, not a fish."),
    ("Give two examples of renewable energy.", 2, "renewable sources", "Both are renewable (e.g. solar, wind, hydro)."),
    ("Name four countries in South America.", 4, "countries", "Every item is a South American country."),
    ("List three instruments in a string quartet.", 3, "instruments", "Names violin, viola and cello."),
    ("Name six vegetables I could put in a stir-fry.", 6, "vegetables",
     "Every item is a vegetable that suits a stir-fry."),
]
for prompt, n, kind, check in LISTS:
    add(prompt,
        c(check, 5, "All correct.", "One wrong item.", "Several wrong."),
        c(f"Gives exactly {n} {kind}, no more, no fewer."[:80], 3, f"Exactly {n}.", "Off by one.", "Other count."),
        c("No item is repeated.", 2, "No repeats.", "One repeat.", "Several repeats."))

WORD_LIMITS = [
    ("Describe your ideal weekend in under 50 words.", "Is under 50 words.", "Describes a weekend (activities, pace)."),
    ("Summarise the plot of Cinderella in at most 40 words.", "Is at most 40 words.",
     "Covers the ball, the lost slipper and the prince finding her."),
    ("Write a one-sentence product description for a reusable water bottle.", "Is exactly one sentence.",
     "Names a real benefit (reusable, keeps drinks cold, less plastic)."),
    ("In 30 words or fewer, say why breakfast matters.", "Is 30 words or fewer.",
     "Gives a reason (energy, focus, steady blood sugar)."),
    ("Write a tweet (under 280 characters) announcing a bake sale on Saturday.", "Is under 280 characters.",
     "Says it is a bake sale and that it is on Saturday."),
    ("Give a 20-word description of a lighthouse.", "Has about 20 words (18-22).",
     "Describes a lighthouse (tower, light, guides ships)."),
]
for prompt, limit, content in WORD_LIMITS:
    add(prompt,
        c(limit, 4, "Within the limit.", "Slightly over.", "Far over."),
        c(content, 4, "Fully covered.", "Partly covered.", "Missing."),
        c("Reads naturally, with no filler.", 2, "Natural.", "Some filler.", "Awkward."))

FORMAT_TASKS = [
    ("Give three fruits as a JSON list of strings.", "Output is a valid JSON list of strings, nothing else.",
     "The list has exactly 3 strings, each a fruit.", "Valid JSON list.", "Exactly 3 fruits."),
    ("Write the days of the week in a numbered list.", "Is a numbered list 1 to 7.",
     "Lists Monday to Sunday (or Sunday to Saturday), all 7 days.", "Numbered 1-7.", "All 7 days."),
    ("Make a markdown table with two columns, Animal and Sound, and three rows.",
     "Is a markdown table with headers Animal and Sound.", "Has exactly 3 rows, each a real animal and its sound.",
     "Right table.", "3 correct rows."),
    ("Reply in all capital letters: what colour is the sky on a clear day?", "Says the sky is blue.",
     "The whole reply is in capital letters.", "Says blue.", "All caps."),
    ("Write the word 'hello' in Spanish, French and German, one per line.",
     "Gives hola (Spanish), bonjour (French) and hallo (German).", "Puts each on its own line (3 lines).",
     "All three right.", "One per line."),
    ("Give me a grocery list of five items as a comma-separated line.", "Is one line, items separated by commas.",
     "Has exactly 5 items, each something sold in a grocery store.", "Comma-separated.", "Five grocery items."),
]
for prompt, fmt, content, fmt_ok, content_ok in FORMAT_TASKS:
    add(prompt,
        c(fmt, 5, fmt_ok, "Nearly that format.", "Other format."),
        c(content, 5, content_ok, "One item wrong.", "Mostly wrong."))

# ----------------------------------------------------------------------------- one-off prompts

add("Write a short email to my manager asking for Friday off for a dentist appointment.",
    c("Asks for this Friday off and gives the dentist appointment as the reason.", 5, "Request and reason.",
      "Only one of them.", "Neither."),
    c("Has a greeting, a sign-off and a clear subject or opening line.", 3, "All present.", "One missing.",
      "Not email-like."),
    c("Is polite and under about 120 words.", 2, "Polite and brief.", "Polite but long.", "Rude or rambling."))
add("How do I make a cup of green tea?",
    c("Says to use water below boiling (about 70-80 C), not boiling.", 4, "Gives the temperature.",
      "Says 'not boiling' only.", "Says boiling water."),
    c("Gives a steeping time of about 1-3 minutes.", 3, "1-3 minutes.", "Vague timing.", "No time or 10+ min."),
    c("Lists the steps in order (heat water, add tea, steep, remove leaves).", 3, "Clear steps.",
      "Steps out of order.", "No steps."))
add("What should I do if I lock myself out of my house?",
    c("Suggests checking other doors, windows or a spare key with someone.", 4, "Checks options.",
      "Mentions one vaguely.", "Missing."),
    c("Suggests calling a licensed locksmith or the landlord.", 4, "Mentions one.", "Vague 'get help'.",
      "Missing."),
    c("Warns against forcing a window or door in an unsafe way.", 2, "Warns.", "Implied.", "Suggests force."))
add("Explain the difference between weather and climate.",
    c("Says weather is short-term conditions (hours to days).", 4, "Stated.", "Vague.", "Wrong or missing."),
    c("Says climate is the long-term average (decades) for a region.", 4, "Stated.", "Vague.", "Wrong or missing."),
    c("Gives one concrete example contrasting the two.", 2, "Clear example.", "Weak example.", "None."))
add("Give me three tips for a first day at a new job.",
    c("Gives exactly 3 tips.", 3, "Exactly 3.", "Off by one.", "Other count."),
    c("Tips are concrete (arrive early, learn names, ask questions, take notes).", 5, "All concrete.",
      "Some generic.", "All generic."),
    c("Is brief: one or two sentences per tip.", 2, "Brief.", "Some long tips.", "Very long."))
add("What is the boiling point of water at sea level in Fahrenheit?",
    c("Gives 212 degrees Fahrenheit.", 8, "Says 212 F.", "Gives 100 C only.", "Wrong value."),
    c("Is a short direct answer.", 2, "Short.", "Some padding.", "Long."))
add("Who wrote 'Pride and Prejudice'?",
    c("Names Jane Austen as the author.", 8, "Says Jane Austen.", "Says 'Austen' unclearly.", "Wrong author."),
    c("Any extra fact given is correct (e.g. published 1813).", 2, "Correct or none.", "Minor slip.",
      "False claim."))
add("Suggest a name for a small bakery that sells mostly bread.",
    c("Gives at least one name for the bakery.", 4, "Gives a name.", "Only vague ideas.", "No name."),
    c("The name suggests bread or baking (e.g. loaf, crust, dough, oven).", 4, "Clearly bread-related.",
      "Loosely related.", "Unrelated."),
    c("The name is short and easy to say (1-4 words).", 2, "Short.", "A bit long.", "Long or awkward."))
add("How long should I boil pasta?",
    c("Says most dried pasta takes about 8-12 minutes.", 5, "Gives 8-12 min.", "Roughly right.", "Wrong or none."),
    c("Says to check the packet time or taste for al dente.", 3, "Says one of them.", "Implied.", "Missing."),
    c("Mentions salted, boiling water before adding pasta.", 2, "Mentioned.", "Partly.", "Missing."))
add("Explain what a budget is to a 10-year-old.",
    c("Says a budget is a plan for how to spend and save money.", 5, "Clear definition.", "Vague.", "Wrong."),
    c("Uses a simple example a child knows (pocket money, toys, snacks).", 3, "Child-level example.",
      "Adult example.", "No example."),
    c("Uses short sentences and no financial jargon.", 2, "Simple words.", "Some jargon.", "Full of jargon."))
add("Write a thank-you note to a friend who helped me move house.",
    c("Thanks the friend specifically for helping with the move.", 5, "Specific thanks.", "Generic thanks.",
      "No thanks."),
    c("Mentions a concrete detail (carrying boxes, the van, the long day).", 3, "Concrete detail.",
      "Vague detail.", "None."),
    c("Is warm and short (a few sentences).", 2, "Warm and short.", "Too long or stiff.", "Cold or rambling."))
add("Is a tomato a fruit or a vegetable?",
    c("Says botanically a tomato is a fruit (it holds the seeds).", 6, "Says fruit, with why.", "Says fruit only.",
      "Says vegetable only."),
    c("Notes it is treated as a vegetable in cooking.", 3, "Notes it.", "Hints at it.", "Missing."),
    c("Answers in a few sentences.", 1, "Concise.", "Somewhat long.", "Very long."))
add("What does HTML stand for?",
    c("Says HyperText Markup Language.", 8, "Exact expansion.", "One word off.", "Wrong."),
    c("Is a direct, short answer.", 2, "Short.", "Padded.", "Long."))
add("Give me a simple recipe for scrambled eggs for one person.",
    c("Lists ingredients with amounts (about 2-3 eggs, butter, salt).", 4, "With amounts.", "No amounts.",
      "No ingredients."),
    c("Gives steps in order: whisk, cook on low-medium heat, stir, remove.", 4, "Clear ordered steps.",
      "Steps unclear.", "No steps."),
    c("Says how to tell they are done (soft, just set).", 2, "Says it.", "Vague.", "Missing."))
add("Why do cats purr?",
    c("Says cats purr when content or relaxed.", 4, "Stated.", "Vague.", "Missing."),
    c("Says cats also purr when stressed, ill or in pain (self-soothing).", 4, "Stated.", "Hinted.", "Missing."),
    c("Does not state speculation as settled fact.", 2, "Careful.", "Some overclaiming.", "False certainty."))
add("Recommend three habits for better posture at a desk.",
    c("Gives exactly 3 habits.", 3, "Exactly 3.", "Off by one.", "Other count."),
    c("Habits are concrete (screen at eye level, feet flat, breaks each hour).", 5, "All concrete.",
      "Some vague.", "All vague."),
    c("Each habit says briefly why it helps.", 2, "All explained.", "Some explained.", "None."))
add("Translate 'thank you very much' into Spanish.",
    c("Gives 'muchas gracias' (or 'muchisimas gracias').", 8, "Correct phrase.", "Only 'gracias'.", "Wrong."),
    c("Gives the translation first, with little extra text.", 2, "Direct.", "Some padding.", "Buried."))
add("What are the three states of matter?",
    c("Names solid, liquid and gas.", 7, "All three.", "Two of three.", "One or none."),
    c("Says in a phrase what sets each apart (shape, volume).", 2, "Brief contrast.", "Partial.", "None."),
    c("If plasma is mentioned, it is marked as a fourth state.", 1, "Handled right.", "Unclear.", "Replaces one."))
add("Help me write a polite reminder to a client whose invoice is two weeks overdue.",
    c("Says the invoice is two weeks overdue and asks for payment.", 5, "Both clear.", "One clear.", "Neither."),
    c("Includes the details needed: invoice number, amount or due date.", 3, "Details present.",
      "Placeholders only.", "No details."),
    c("Stays polite and professional, with no threats.", 2, "Polite.", "Slightly curt.", "Rude or threatening."))
add("What is the difference between 'affect' and 'effect'?",
    c("Says 'affect' is usually a verb (to influence).", 4, "Stated.", "Vague.", "Wrong."),
    c("Says 'effect' is usually a noun (a result).", 4, "Stated.", "Vague.", "Wrong."),
    c("Gives an example sentence for each word.", 2, "Both examples.", "One example.", "None."))
add("Plan a 3-day itinerary for a first visit to Rome.",
    c("Has exactly 3 days, each labelled (Day 1, Day 2, Day 3).", 3, "3 labelled days.", "Unclear days.",
      "Other count."),
    c("Includes major sights: Colosseum, Vatican Museums, Trevi Fountain.", 4, "All three.", "One or two.",
      "None."),
    c("Groups sights that are near each other on the same day.", 3, "Sensible grouping.", "Some zigzag.",
      "Random order."))
add("How can I tell if an egg is still fresh?",
    c("Describes the float test: fresh eggs sink, old eggs float.", 5, "Described right.", "Vague.",
      "Wrong or missing."),
    c("Mentions checking the date or the smell after cracking.", 3, "Mentions one.", "Vague.", "Missing."),
    c("Says to throw away an egg that smells bad.", 2, "Says it.", "Implied.", "Missing."))
add("Write a limerick about a forgetful dog.",
    c("Has exactly 5 lines.", 3, "Five lines.", "Four or six.", "Other."),
    c("Rhymes AABBA.", 3, "AABBA.", "Mostly rhymes.", "No rhyme scheme."),
    c("Is about a forgetful dog.", 3, "On topic.", "Dog but not forgetful.", "Off topic."),
    c("Is light and humorous.", 1, "Funny.", "Mild.", "Not humorous."))
add("What is the largest ocean on Earth?",
    c("Names the Pacific Ocean.", 8, "Says Pacific.", "Hedges.", "Wrong ocean."),
    c("Any extra fact given is correct.", 2, "Correct or none.", "Minor slip.", "False claim."))
add("Explain what a compound interest is with a simple example.",
    c("Says interest is earned on the principal and on past interest.", 5, "Clear definition.", "Vague.",
      "Wrong."),
    c("Gives a worked number example (e.g. 100 at 10% is 110, then 121).", 4, "Correct numbers.",
      "Numbers with a slip.", "No example."),
    c("Keeps it short and plain.", 1, "Short.", "Long.", "Confusing."))
add("Give me a 5-item checklist for leaving on a two-week holiday.",
    c("Has exactly 5 checklist items.", 3, "Exactly 5.", "Off by one.", "Other count."),
    c("Items are concrete (lock doors, stop mail, unplug devices, passports).", 5, "All concrete.",
      "Some vague.", "All vague."),
    c("Is formatted as a list.", 2, "List format.", "Partly listed.", "Prose."))
add("Which is heavier, a kilogram of feathers or a kilogram of iron?",
    c("Says they weigh the same (both are one kilogram).", 8, "Same weight.", "Hedges.", "Says iron."),
    c("Explains briefly why (mass is equal; only volume differs).", 2, "Explains.", "Partly.", "No reason."))
add("Suggest a 20-minute workout I can do at home without equipment.",
    c("Adds up to about 20 minutes (times or rounds given).", 3, "About 20 min.", "Timing vague.",
      "No timing."),
    c("Uses only bodyweight exercises (squats, push-ups, lunges, planks).", 4, "No equipment.",
      "One needs gear.", "Needs equipment."),
    c("Includes a warm-up and a cool-down or stretch.", 3, "Both.", "One.", "Neither."))
add("What does a red traffic light mean?",
    c("Says drivers must stop and wait behind the line.", 8, "Says stop.", "Says slow down.", "Wrong."),
    c("Is a short direct answer.", 2, "Short.", "Padded.", "Long."))
add("Write a two-line rhyming slogan for a recycling campaign.",
    c("Has exactly 2 lines.", 3, "Two lines.", "Three lines.", "Other."),
    c("The two lines rhyme.", 3, "They rhyme.", "Near rhyme.", "No rhyme."),
    c("Encourages recycling.", 4, "Clear message.", "Vague message.", "Off topic."))
add("How many continents are there, and what are they?",
    c("Says there are 7 continents.", 4, "Says 7.", "Mentions other models only.", "Wrong number."),
    c("Names all 7: Africa, Antarctica, Asia, Australia, Europe, N and S America.", 5, "All 7.",
      "5-6 named.", "Fewer."),
    c("Lists each continent once.", 1, "No repeats.", "One repeat.", "Several."))
add("Give me advice on how to ask for a raise.",
    c("Advises preparing evidence: results, responsibilities, market pay data.", 4, "Evidence advice.",
      "Vague.", "Missing."),
    c("Advises choosing a good time and asking for a meeting.", 3, "Timing advice.", "Vague.", "Missing."),
    c("Suggests naming a specific figure or range.", 3, "Suggests it.", "Implied.", "Missing."))
add("Explain why the sky turns red at sunset.",
    c("Says sunlight passes through more atmosphere at a low angle.", 4, "Stated.", "Vague.", "Missing."),
    c("Says blue light is scattered away, leaving red and orange.", 4, "Stated.", "Vague.", "Wrong."),
    c("Is short and plain (a few sentences).", 2, "Short.", "Long.", "Confusing."))
add("Write a short bedtime story about a brave little turtle, under 150 words.",
    c("Is under 150 words.", 3, "Under 150.", "Slightly over.", "Far over."),
    c("Has a turtle as the hero who does something brave.", 4, "Brave turtle.", "Turtle, not brave.",
      "No turtle."),
    c("Has a calm, happy ending suited to bedtime.", 3, "Calm ending.", "Abrupt ending.", "Scary ending."))
add("What is the chemical symbol for gold?",
    c("Gives Au.", 8, "Says Au.", "Right idea, wrong case.", "Wrong symbol."),
    c("Is a short direct answer.", 2, "Short.", "Padded.", "Long."))
add("How do I politely decline a wedding invitation?",
    c("Thanks the couple and congratulates them.", 4, "Both.", "One.", "Neither."),
    c("Says clearly that the writer cannot attend.", 4, "Clear decline.", "Ambiguous.", "No decline."),
    c("Offers a brief reason or a gift or well-wishes, no long excuses.", 2, "Brief and kind.",
      "Over-explains.", "Missing."))
add("Compare cats and dogs as pets in three points.",
    c("Gives exactly 3 points of comparison.", 3, "Exactly 3.", "Off by one.", "Other count."),
    c("Each point covers both cats and dogs.", 4, "Both each time.", "Some one-sided.", "One-sided."),
    c("Points are concrete (exercise needs, independence, space, cost).", 3, "Concrete.", "Some vague.",
      "Vague."))
add("Describe the water cycle for a school project.",
    c("Names evaporation, condensation and precipitation.", 5, "All three.", "Two.", "One or none."),
    c("Says water returns by runoff or collection to seas and rivers.", 3, "Stated.", "Hinted.", "Missing."),
    c("Is accurate and at a school reading level.", 2, "Clear.", "Some jargon.", "Wrong or dense."))
add("How many legs does a spider have?",
    c("Says 8 legs.", 8, "Says 8.", "Hedges.", "Wrong number."),
    c("Is a short direct answer.", 2, "Short.", "Padded.", "Long."))
add("Write an out-of-office reply for when I'm on holiday until 14 July.",
    c("Says the writer is away and returns on 14 July.", 5, "Away and date.", "No date.", "Neither."),
    c("Says when replies will come or who to contact meanwhile.", 3, "Says it.", "Vague.", "Missing."),
    c("Is short and professional.", 2, "Short, professional.", "Long.", "Casual or rude."))
add("What is the main cause of tides?",
    c("Says tides are caused mainly by the Moon's gravity.", 6, "Moon's gravity.", "Gravity, vague.",
      "Wrong cause."),
    c("Mentions the Sun's smaller effect (spring and neap tides).", 2, "Mentioned.", "Hinted.", "Missing."),
    c("Is short and plain.", 2, "Short.", "Long.", "Confusing."))
add("Suggest three vegetarian dinner ideas that take under 30 minutes.",
    c("Gives exactly 3 dinner ideas.", 3, "Exactly 3.", "Off by one.", "Other count."),
    c("Every idea is vegetarian (no meat or fish).", 4, "All vegetarian.", "One unclear.", "Has meat."),
    c("Every idea is plausible in under 30 minutes.", 3, "All quick.", "One slow.", "Mostly slow."))
add("What year did the first person walk on the Moon?",
    c("Gives 1969.", 8, "Says 1969.", "Right decade only.", "Wrong year."),
    c("Any extra detail is correct (Neil Armstrong, Apollo 11).", 2, "Correct or none.", "Minor slip.",
      "False."))
add("Rewrite this sentence to be more formal: 'Hey, can u send me the report asap?'",
    c("Keeps the meaning: a request to send the report soon.", 4, "Meaning kept.", "Partly kept.", "Changed."),
    c("Uses formal language: no 'hey', 'u' or 'asap'.", 4, "Fully formal.", "One informal word.", "Informal."),
    c("Gives one rewritten sentence, not a long explanation.", 2, "One sentence.", "Some extra.", "Long."))
add("Give me two arguments for and two against working from home.",
    c("Gives exactly 2 arguments for working from home.", 3, "Exactly 2.", "1 or 3.", "None."),
    c("Gives exactly 2 arguments against working from home.", 3, "Exactly 2.", "1 or 3.", "None."),
    c("Arguments are concrete (commute time, isolation, focus, costs).", 4, "Concrete.", "Some vague.",
      "Vague."))
add("What should be in a basic first-aid kit?",
    c("Lists plasters, sterile gauze or dressings and bandages.", 4, "All three.", "Some.", "None."),
    c("Lists antiseptic wipes, tweezers, scissors and gloves (at least two).", 3, "Two or more.", "One.",
      "None."),
    c("Is formatted as a list that is easy to scan.", 3, "Clear list.", "Partly listed.", "Prose."))
add("Explain what an API is in one paragraph for a non-programmer.",
    c("Says an API is a defined way for programs to talk to each other.", 5, "Clear definition.", "Vague.",
      "Wrong."),
    c("Uses an everyday analogy (e.g. a waiter taking orders).", 3, "Good analogy.", "Weak analogy.", "None."),
    c("Is one paragraph with no code or jargon.", 2, "One plain paragraph.", "Some jargon.", "Code or long."))
add("Tell me a fun fact about octopuses.",
    c("States a true fact (3 hearts, blue blood, 8 arms, can change colour).", 6, "True fact.",
      "Partly true.", "False."),
    c("Is one fact stated briefly.", 2, "Brief.", "Several facts.", "Long."),
    c("Is interesting rather than trivial (not just 'it lives in the sea').", 2, "Interesting.", "Plain.",
      "Trivial."))
add("Write a motivational quote about persistence, and say it is original.",
    c("Gives a quote about persistence.", 5, "On persistence.", "Loosely related.", "Off topic."),
    c("Is one or two sentences.", 2, "Short.", "Three sentences.", "Long."),
    c("Does not copy a famous quote while calling it original.", 3, "Original.", "Close paraphrase.",
      "Copied."))
add("How often should I water a cactus?",
    c("Says rarely: about every 2-4 weeks, when the soil is fully dry.", 5, "Gives the rule.", "Vague 'rarely'.",
      "Says often."),
    c("Says to water less in winter.", 3, "Says it.", "Hinted.", "Missing."),
    c("Warns that overwatering causes root rot.", 2, "Warns.", "Hinted.", "Missing."))
add("What is the past tense of 'swim'?",
    c("Gives 'swam'.", 7, "Says swam.", "Says swum only.", "Wrong."),
    c("If the past participle is mentioned, it is 'swum'.", 2, "Correct or none.", "Unclear.", "Wrong."),
    c("Is a short direct answer.", 1, "Short.", "Padded.", "Long."))
add("Write a short birthday message for my grandmother turning 90.",
    c("Wishes her a happy birthday and mentions turning 90.", 5, "Both.", "One.", "Neither."),
    c("Is warm and personal (love, memories, gratitude).", 3, "Warm.", "Generic.", "Cold."),
    c("Is short: two to four sentences.", 2, "Short.", "Long.", "Very long."))
add("Explain the rules of tic-tac-toe.",
    c("Says two players take turns marking X and O on a 3x3 grid.", 4, "Stated.", "Partly.", "Missing."),
    c("Says three in a row (across, down or diagonal) wins.", 4, "Stated.", "Partly.", "Missing."),
    c("Says a full grid with no line is a draw.", 2, "Stated.", "Hinted.", "Missing."))
add("What is the speed of light in a vacuum?",
    c("Gives about 300,000 km per second (299,792 km/s).", 8, "Correct value.", "Right order.", "Wrong."),
    c("States the units.", 2, "Units given.", "Unclear units.", "No units."))
add("Give me a packing list for a weekend camping trip.",
    c("Includes shelter and sleep gear: tent, sleeping bag, mat.", 4, "All three.", "Some.", "None."),
    c("Includes water, food, a stove or cooking kit, and a torch.", 3, "Most of them.", "Some.", "None."),
    c("Includes weather clothing and a first-aid kit.", 3, "Both.", "One.", "Neither."))
add("Write a polite text message to a neighbour about their loud music late at night.",
    c("Mentions the loud music and that it is late at night.", 4, "Both.", "One.", "Neither."),
    c("Makes a clear, specific request (turn it down after a certain time).", 4, "Clear request.", "Vague.",
      "No request."),
    c("Is friendly and short, fit for a text message.", 2, "Friendly, short.", "Long or stiff.", "Hostile."))
add("Explain what a black hole is.",
    c("Says it is a region where gravity is so strong that light cannot escape.", 6, "Stated.", "Vague.",
      "Wrong."),
    c("Mentions it forms when a massive star collapses.", 2, "Mentioned.", "Hinted.", "Missing."),
    c("Mentions the event horizon as the point of no return.", 2, "Mentioned.", "Hinted.", "Missing."))
add("How do I remove a coffee stain from a cotton shirt?",
    c("Says to act fast: blot, do not rub, rinse from the back with cold water.", 4, "Covers it.", "Partly.",
      "Missing."),
    c("Suggests a treatment (liquid detergent, dish soap or vinegar) before washing.", 4, "Suggests one.",
      "Vague.", "None."),
    c("Warns not to dry the shirt until the stain is gone.", 2, "Warns.", "Hinted.", "Missing."))
add("Answer yes or no: is the Great Wall of China visible from the Moon with the naked eye?",
    c("Answers no.", 7, "Says no.", "Hedges.", "Says yes."),
    c("Starts with yes or no as asked.", 2, "Starts with it.", "Later.", "Never."),
    c("Any reason given is correct (too narrow, too far).", 1, "Correct or none.", "Vague.", "Wrong."))
add("Write a six-word story about moving to a new city.",
    c("Has exactly six words.", 5, "Six words.", "Five or seven.", "Other count."),
    c("Is about moving to a new city.", 4, "On topic.", "Loosely related.", "Off topic."),
    c("Gives only the story, no explanation.", 1, "Story only.", "Short extra.", "Long extra."))
add("Name the author of '1984' and the year it was published.",
    c("Names George Orwell.", 5, "Orwell.", "Hedges.", "Wrong author."),
    c("Gives 1949 as the year of publication.", 4, "1949.", "Off by a year.", "Wrong year."),
    c("Is short.", 1, "Short.", "Padded.", "Long."))
add("What are some ways to stay focused while working?",
    c("Suggests removing distractions (phone away, notifications off).", 3, "Suggested.", "Vague.", "Missing."),
    c("Suggests a work method (time blocks, Pomodoro, a to-do list).", 3, "Suggested.", "Vague.", "Missing."),
    c("Suggests breaks, sleep or movement to keep energy up.", 2, "Suggested.", "Vague.", "Missing."),
    c("Is a clear list of distinct tips.", 2, "Clear list.", "Some overlap.", "Muddled."))
add("Explain in simple terms how a refrigerator keeps food cold.",
    c("Says a refrigerant absorbs heat inside and releases it outside.", 5, "Stated.", "Vague.", "Wrong."),
    c("Mentions the compressor and the coils on the back.", 3, "Both.", "One.", "Neither."),
    c("Uses plain words and at most a short paragraph.", 2, "Plain, short.", "Some jargon.", "Dense."))
add("Write three interview questions for a barista job.",
    c("Gives exactly 3 questions.", 3, "Exactly 3.", "Off by one.", "Other count."),
    c("Every question fits a barista job (coffee, customers, rush hours).", 5, "All fit.", "One generic.",
      "Generic."),
    c("Each is phrased as a question.", 2, "All questions.", "Some statements.", "None."))
add("What is the difference between a virus and a bacterium?",
    c("Says bacteria are living single cells that reproduce on their own.", 4, "Stated.", "Vague.", "Wrong."),
    c("Says viruses are much smaller and need a host cell to reproduce.", 4, "Stated.", "Vague.", "Wrong."),
    c("Says antibiotics work on bacteria, not viruses.", 2, "Stated.", "Hinted.", "Missing or wrong."))
add("Can you recommend a good way to learn to touch type?",
    c("Recommends daily short practice with a typing tutor or site.", 4, "Recommended.", "Vague.", "Missing."),
    c("Says to keep fingers on the home row and not look at the keys.", 4, "Both.", "One.", "Neither."),
    c("Says accuracy first, speed later.", 2, "Said.", "Hinted.", "Missing."))
add("Write an acrostic poem for the word SUN.",
    c("Has exactly 3 lines starting with S, U and N in that order.", 6, "S-U-N lines.", "Order off.",
      "Not acrostic."),
    c("Is about the sun (light, warmth, sky).", 3, "On topic.", "Loosely related.", "Off topic."),
    c("Gives only the poem.", 1, "Poem only.", "Short extra.", "Long extra."))
add("Tell me how to make a paper airplane.",
    c("Gives numbered steps in order, starting with folding the sheet lengthwise.", 4, "Ordered steps.",
      "Unordered.", "No steps."),
    c("Includes folding the top corners to the centre line to form a point.", 3, "Included.", "Vague.",
      "Missing."),
    c("Ends with folding the wings down and a throwing tip.", 3, "Both.", "One.", "Neither."))
add("I feel stressed before exams. What can I do?",
    c("Suggests a study plan broken into small tasks.", 3, "Suggested.", "Vague.", "Missing."),
    c("Suggests calming habits: sleep, breaks, breathing, exercise.", 4, "Two or more.", "One.", "None."),
    c("Is supportive, and suggests talking to someone if stress is severe.", 3, "Both.", "One.", "Neither."))
add("Write a product review of a pair of running shoes in exactly three sentences.",
    c("Has exactly three sentences.", 4, "Exactly 3.", "Off by one.", "Other count."),
    c("Comments on concrete qualities (comfort, grip, weight, durability).", 4, "Concrete.", "Vague.", "None."),
    c("Gives an overall verdict or rating.", 2, "Verdict given.", "Implied.", "Missing."))
add("Which planet is known as the Red Planet?",
    c("Names Mars.", 8, "Says Mars.", "Hedges.", "Wrong."),
    c("Any reason given is correct (iron oxide dust).", 2, "Correct or none.", "Vague.", "Wrong."))
add("How do I change a flat tyre on a car?",
    c("Says to park safely first: flat ground, handbrake, hazard lights.", 3, "Stated.", "Partly.", "Missing."),
    c("Says to loosen the wheel nuts before jacking the car up.", 3, "Stated.", "Order unclear.", "Missing."),
    c("Gives the remaining steps: jack up, swap wheel, tighten nuts in a star pattern.", 4, "All steps.",
      "Some steps.", "None."))
add("List the ingredients of a classic margherita pizza.",
    c("Lists dough, tomato sauce, mozzarella and basil.", 7, "All four.", "Three.", "Fewer."),
    c("Mentions olive oil or salt as optional extras, nothing off-style.", 1, "Fits.", "Minor extra.",
      "Wrong toppings."),
    c("Is formatted as a list.", 2, "List.", "Partly.", "Prose."))
add("Explain the offside rule in football in simple words.",
    c("Says a player is offside if past the ball and the second-last defender.", 6,
      "Stated right.", "Partly right.", "Wrong."),
    c("Says it only counts when the ball is played to them and they are involved.", 2, "Stated.", "Hinted.",
      "Missing."),
    c("Uses simple words and is short.", 2, "Simple.", "Some jargon.", "Confusing."))
add("Make a short to-do list for cleaning a kitchen.",
    c("Includes dishes, wiping counters and cleaning the sink.", 4, "All three.", "Some.", "None."),
    c("Includes the floor and taking out the rubbish.", 3, "Both.", "One.", "Neither."),
    c("Is a list of short items, in a sensible order (top to bottom).", 3, "Ordered list.", "Unordered.",
      "Prose."))
add("Is it safe to look directly at the sun?",
    c("Says no: it can permanently damage the eyes (retina).", 7, "Says no, with harm.", "Says no only.",
      "Says yes."),
    c("Mentions safe ways (eclipse glasses, pinhole projector).", 3, "Mentioned.", "Vague.", "Missing."))
add("Write a formal complaint about a late train to a railway company in under 100 words.",
    c("Names the late train (date, route or time) and how late it was.", 4, "Details given.",
      "Placeholders.", "Missing."),
    c("States what the writer wants (refund, compensation, apology).", 3, "Clear request.", "Vague.",
      "Missing."),
    c("Is formal and under 100 words.", 3, "Both.", "One.", "Neither."))
add("What's a good name for a goldfish? Give me five options.",
    c("Gives exactly 5 names.", 5, "Exactly 5.", "Off by one.", "Other count."),
    c("Names suit a goldfish (playful, fishy, gold-themed).", 3, "All fitting.", "Some odd.", "Unfitting."),
    c("No name repeats.", 2, "No repeats.", "One repeat.", "Several."))
add("Describe the taste of a lemon to someone who has never had one.",
    c("Says a lemon tastes very sour (acidic).", 6, "Says sour.", "Implied.", "Wrong taste."),
    c("Compares to a familiar taste or sensation (makes your mouth pucker).", 3, "Good comparison.",
      "Weak.", "None."),
    c("Is short and vivid.", 1, "Vivid.", "Flat.", "Long."))
add("How many days are there in a leap year?",
    c("Gives 366 days.", 8, "Says 366.", "Hedges.", "Wrong."),
    c("Any extra fact is correct (29 February, every 4 years with exceptions).", 2, "Correct or none.",
      "Minor slip.", "Wrong."))
add("Explain why you should wash your hands for 20 seconds.",
    c("Says 20 seconds of scrubbing with soap removes most germs.", 5, "Stated.", "Vague.", "Missing."),
    c("Explains soap breaks up oils and lifts germs off the skin.", 3, "Explained.", "Vague.", "Missing."),
    c("Is short and plain.", 2, "Short.", "Long.", "Confusing."))
add("Write a cheerful good-morning message for a team chat.",
    c("Says good morning to the team.", 4, "Says it.", "Implied.", "Missing."),
    c("Is cheerful and encouraging.", 4, "Cheerful.", "Neutral.", "Gloomy."),
    c("Is short: one to three sentences.", 2, "Short.", "Long.", "Very long."))
add("What are the colours of the rainbow in order?",
    c("Lists red, orange, yellow, green, blue, indigo, violet.", 6, "All 7 in order.", "All, order off.",
      "Missing colours."),
    c("Keeps the order from red to violet.", 3, "Right order.", "One swap.", "Wrong."),
    c("Is short.", 1, "Short.", "Padded.", "Long."))
add("Suggest a gift for a coworker who is retiring, under 30 dollars.",
    c("Suggests at least one specific gift.", 4, "Specific gift.", "Vague idea.", "None."),
    c("Every suggestion plausibly costs under 30 dollars.", 4, "All under 30.", "One unclear.", "Too costly."),
    c("Suits a retirement (hobbies, leisure, a keepsake).", 2, "Fits.", "Generic.", "Unfitting."))
add("How do you say 'good night' in French?",
    c("Gives 'bonne nuit'.", 8, "Says bonne nuit.", "Says bonsoir only.", "Wrong."),
    c("Is a short direct answer.", 2, "Short.", "Padded.", "Long."))
add("What is a haiku? Explain briefly.",
    c("Says a haiku is a short Japanese poem of three lines.", 5, "Stated.", "Partly.", "Wrong."),
    c("Gives the 5-7-5 syllable pattern.", 4, "Gives 5-7-5.", "Wrong numbers.", "Missing."),
    c("Is brief.", 1, "Brief.", "Long.", "Very long."))
add("Give me a quick way to remember the order of the planets.",
    c("Gives a mnemonic whose first letters are M V E M J S U N.", 6, "Correct letters.", "One wrong.",
      "Wrong."),
    c("Lists the planets the mnemonic stands for, Mercury to Neptune.", 3, "All 8.", "Some.", "None."),
    c("Is short.", 1, "Short.", "Long.", "Very long."))
add("What time zone is London in during winter?",
    c("Says Greenwich Mean Time (GMT, UTC+0).", 8, "GMT.", "Says BST.", "Wrong."),
    c("If summer time is mentioned, it is BST (UTC+1).", 2, "Correct or none.", "Vague.", "Wrong."))
add("Give a short pep talk to someone running their first marathon tomorrow.",
    c("Is encouraging and addresses the first marathon tomorrow.", 5, "On point.", "Generic.", "Off topic."),
    c("Includes one or two practical tips (pace, water, sleep).", 3, "Practical tips.", "Vague.", "None."),
    c("Is short: under about 100 words.", 2, "Short.", "Long.", "Very long."))
add("Sort these numbers from smallest to largest: 42, 7, 19, 3, 88.",
    c("Gives 3, 7, 19, 42, 88.", 8, "Correct order.", "One swap.", "Wrong."),
    c("Keeps all five numbers, none added or dropped.", 2, "All five.", "One missing.", "Several wrong."))
add("What is the longest river in Africa?",
    c("Names the Nile.", 8, "Says Nile.", "Hedges.", "Wrong river."),
    c("Any extra fact given is correct.", 2, "Correct or none.", "Minor slip.", "False."))
add("Write a short apology to a friend for missing their party.",
    c("Apologises clearly for missing the party.", 5, "Clear apology.", "Half-hearted.", "No apology."),
    c("Offers to make up for it (meet up, call, celebrate later).", 3, "Offers.", "Vague.", "Missing."),
    c("Is sincere and short, without long excuses.", 2, "Sincere, short.", "Excuses.", "Insincere."))
add("Explain what recycling symbol numbers on plastic mean.",
    c("Says the number (1-7) identifies the type of plastic resin.", 6, "Stated.", "Vague.", "Wrong."),
    c("Gives at least one example (1 is PET, 2 is HDPE).", 2, "Correct example.", "Vague.", "None or wrong."),
    c("Notes the symbol does not mean the item is recyclable everywhere.", 2, "Noted.", "Hinted.", "Missing."))
add("What's the quickest way to cool down a hot drink?",
    c("Suggests a concrete method (ice cube, pour between cups, cold spoon, wide cup).", 6, "Concrete.",
      "Vague.", "None."),
    c("Methods are safe and would actually cool the drink.", 3, "Sound.", "Doubtful.", "Wrong."),
    c("Is short.", 1, "Short.", "Long.", "Very long."))
add("Spell out the number 4,508 in words.",
    c("Gives 'four thousand five hundred eight' (with or without 'and').", 8, "Correct.", "One word wrong.",
      "Wrong."),
    c("Gives only the number in words.", 2, "Direct.", "Some extra.", "Long."))
add("Write a cover letter opening sentence for a junior graphic designer role.",
    c("Is one sentence.", 3, "One sentence.", "Two sentences.", "Long."),
    c("Names the junior graphic designer role.", 4, "Names role.", "Vague role.", "Missing."),
    c("Is confident and professional, with a reason for interest.", 3, "Both.", "One.", "Neither."))
add("What causes hiccups, and how can I stop them?",
    c("Says hiccups are spasms of the diaphragm.", 4, "Stated.", "Vague.", "Wrong."),
    c("Gives at least two common remedies (hold breath, sip cold water).", 4, "Two or more.", "One.", "None."),
    c("Says to see a doctor if hiccups last more than two days.", 2, "Says it.", "Vague.", "Missing."))
add("Describe a sunrise using all five senses.",
    c("Includes sight, sound, smell, touch and taste.", 6, "All five.", "Three or four.", "Two or fewer."),
    c("Is clearly about a sunrise.", 3, "On topic.", "Loosely.", "Off topic."),
    c("Is vivid and concise.", 1, "Vivid.", "Flat.", "Long."))


# ----------------------------------------------------------------------------- checks and output


def _rubric(criteria: list[tuple]) -> dict:
    return {"criteria": [{"criterion": text, "weight": units / 10,
                          "scoring_levels": {"1.0": full, "0.5": half, "0.0": none}}
                         for text, units, full, half, none in criteria]}


def check(prompt: str, criteria: list[tuple]) -> list[str]:
    errs = []
    if not 2 <= len(criteria) <= 4:
        errs.append(f"{len(criteria)} criteria")
    if sum(u for _, u, *_ in criteria) != 10:
        errs.append("weights do not sum to 1")
    for text, units, *levels in criteria:
        if not text.isascii() or len(text) > 80 or not 1 <= units <= 9 or any(ch in text for ch in '"\\'):
            errs.append(f"criterion {text!r}")
        errs += [f"level {lv!r}" for lv in levels
                 if not lv.isascii() or len(lv) > 30 or not lv.strip() or any(ch in lv for ch in '"\\')]
    if not prompt.isascii():
        errs.append("non-ASCII prompt")
    return errs


def main() -> int:
    seen: set[str] = set()
    bad = 0
    lines = []
    for prompt, criteria in ROWS:
        if prompt in seen:
            print(f"duplicate prompt: {prompt}", file=sys.stderr)
            bad += 1
        seen.add(prompt)
        for err in check(prompt, criteria):
            print(f"{prompt}: {err}", file=sys.stderr)
            bad += 1
        lines.append(json.dumps({"prompt": prompt, "rubric": _rubric(criteria), "source": "handwritten"}))
    if bad:
        return 1
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} rubrics to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
